export interface BoundGrepOperations {}
