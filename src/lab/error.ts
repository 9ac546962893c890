// The lab's failure class. Commands the lab runs go through src/sh.ts (CommandError).
import { type ErrorOptions, KubetunError } from '../errors.ts';

/** A lab step that failed (a process, the lock, a state file): not the user's typo. Exit 1. */
export class LabError extends KubetunError {
  constructor(message: string, options: ErrorOptions = {}) {
    super('LAB', message, options);
  }
}
