// Placeholder until one-call wiring lands (issue 6).
export function createNativeTools() {
  throw new Error("pi-native-ops: createNativeTools is not implemented yet");
}
export function createNativeToolDefinitions() {
  throw new Error("pi-native-ops: createNativeToolDefinitions is not implemented yet");
}
