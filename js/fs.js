// Placeholder until boundFs lands (issue 2).
export function createBoundFs() {
  throw new Error("pi-native-ops: createBoundFs is not implemented yet");
}
