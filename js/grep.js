// Placeholder until the grep capability lands (issue 5).
export function grep() {
  throw new Error("pi-native-ops: grep is not implemented yet");
}
export function createGrepTool() {
  throw new Error("pi-native-ops: createGrepTool is not implemented yet");
}
export function createGrepToolDefinition() {
  throw new Error("pi-native-ops: createGrepToolDefinition is not implemented yet");
}
export function createGrepOperations() {
  return undefined;
}
