import { ApiError } from '../errors.ts';

/** The answer of an operation whose contract exists but whose behaviour has not been built yet. */
export function notImplemented(): never {
  throw new ApiError(501, 'NOT_IMPLEMENTED', 'This operation is not implemented yet');
}
