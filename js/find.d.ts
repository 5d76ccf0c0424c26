export interface BoundFindOperations {}
