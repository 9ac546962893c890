// The tests' list/watch API server: the lab's own (src/lab/list-watch-server.ts), under the name
// the tests have always used.
export { ListWatchServer as FakeApiServer, matches } from '../../src/lab/list-watch-server.ts';
export type { Kind } from '../../src/lab/list-watch-server.ts';
