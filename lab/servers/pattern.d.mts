export declare const PATTERN_SEED: number;
export declare function patternState(): { x: number };
export declare function fillPattern(state: { x: number }, buf: Uint8Array): void;
export declare function patternChunks(n: number, chunkSize?: number): Generator<Uint8Array>;
