// Manifest errors: every message names the file, object and field, so a user can fix the input
// without a debugger. The base classes live in src/errors.ts; KubetunError is re-exported here
// for the modules that imported it from this file first.
import { UserError } from '../errors.ts';

export { KubetunError } from '../errors.ts';

/** Stable codes for every way a manifest can be rejected. */
export type ManifestErrorCode =
  | 'MANIFEST_IO'
  | 'MANIFEST_YAML_SYNTAX'
  | 'MANIFEST_NOT_AN_OBJECT'
  | 'MANIFEST_API_VERSION'
  | 'MANIFEST_MISSING_FIELD'
  | 'MANIFEST_WRONG_TYPE'
  | 'MANIFEST_INVALID_VALUE'
  | 'MANIFEST_TOO_LONG'
  | 'MANIFEST_BAD_IP'
  | 'MANIFEST_CLUSTER_IP'
  | 'MANIFEST_IP_FAMILY'
  | 'MANIFEST_PORT_RANGE'
  | 'MANIFEST_NODEPORT_RANGE'
  | 'MANIFEST_UNKNOWN_PROTOCOL'
  | 'MANIFEST_DUPLICATE_PORT'
  | 'MANIFEST_DUPLICATE_OBJECT'
  | 'MANIFEST_CONFLICT'
  | 'MANIFEST_SLICE_NO_SERVICE'
  | 'MANIFEST_ADDRESS_TYPE';

/**
 * A manifest was rejected. `file` is the path as given; `object` is "Kind namespace/name" (or
 * "Kind in document N" when the name is missing, "" when the file as a whole is bad); `field`
 * is the path inside the document, e.g. `spec.ports[1].port` ("" when not about one field).
 */
export class ManifestError extends UserError {
  declare readonly code: ManifestErrorCode;
  readonly file: string;
  readonly object: string;
  readonly field: string;
  readonly reason: string;
  constructor(
    code: ManifestErrorCode,
    where: { file: string; object: string; field: string },
    reason: string,
    options?: { cause?: unknown },
  ) {
    const parts = [where.file, where.object, where.field].filter((p) => p !== '');
    super(code, `${parts.join(': ')}: ${reason}`, options);
    this.name = 'ManifestError';
    this.file = where.file;
    this.object = where.object;
    this.field = where.field;
    this.reason = reason;
  }
}

/**
 * The file as a whole could not be read or parsed (MANIFEST_IO, MANIFEST_YAML_SYNTAX), as
 * opposed to one object refused: a watcher keeps every object of such a file as it was.
 */
export class ManifestFileError extends ManifestError {
  declare readonly code: 'MANIFEST_IO' | 'MANIFEST_YAML_SYNTAX';
  constructor(
    code: 'MANIFEST_IO' | 'MANIFEST_YAML_SYNTAX',
    where: { file: string; object: string; field: string },
    reason: string,
    options?: { cause?: unknown },
  ) {
    super(code, where, reason, options);
    this.name = 'ManifestFileError';
  }
}
