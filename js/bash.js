// Placeholder until the exec capability lands (issue 3).
export function createBashOperations() {
  throw new Error("pi-native-ops: createBashOperations is not implemented yet");
}
