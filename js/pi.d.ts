// pi's own types for what the tool factories return, from the pi that is installed. Both pi packages
// are optional peer dependencies, so either import may not resolve: @ts-ignore keeps that from being
// an error, and an unresolved module's types are `any`, which selects the other one. With both
// installed, the types are @earendil-works's, as the run-time default is.
// @ts-ignore optional peer dependency
import type * as Current from "@earendil-works/pi-coding-agent";
// @ts-ignore optional peer dependency
import type * as Legacy from "@mariozechner/pi-coding-agent";

type IsAny<T> = 0 extends 1 & T ? true : false;
// Wrapped in [] so an `any` check picks one branch instead of the union of both.
type Pick2<C, L> = [IsAny<C>] extends [true] ? L : C;

/** The installed pi-coding-agent module's type. */
export type Pi = Pick2<typeof Current, typeof Legacy>;
/** pi's `BashSpawnHook`: rewrites a command, cwd or environment before the bash tool runs it. */
export type BashSpawnHook = Pick2<Current.BashSpawnHook, Legacy.BashSpawnHook>;

/** A pi-coding-agent module (either package) as `import * as pi from "…"` gives it: the `pi` option of the factories. */
export type PiModule = typeof Current | typeof Legacy;

export declare function requirePi(): { name: string; module: Pi };
/** The `pi` option if given (a TypeError when it is not a pi module), else {@link requirePi}'s module. */
export declare function piOf(option?: PiModule): Pi;
