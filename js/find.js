// Placeholder until the find capability lands (issue 4).
export function glob() {
  throw new Error("pi-native-ops: glob is not implemented yet");
}
export function createFindOperations() {
  return undefined;
}
