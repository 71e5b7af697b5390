/**
 * Characters a profile name may not hold: control characters (Unicode Cc), the line and paragraph
 * separators, bidirectional controls (the marks U+061C, U+200E, U+200F; embeddings and overrides
 * U+202A-U+202E; isolates U+2066-U+2069) and format characters that hide text (soft hyphen, U+180E,
 * zero-width space, word joiner and the invisible operators, the deprecated U+206A-U+206F, the BOM,
 * the interlinear annotation marks). The zero-width joiner and non-joiner stay: emoji sequences and
 * Persian and Indic scripts need them. Written with \u escapes only, so that the contract's copy
 * means the same to a validator with or without Unicode regular expressions.
 */
const REFUSED =
  '\\u0000-\\u001F\\u007F-\\u009F\\u00AD\\u061C\\u180E\\u200B\\u200E\\u200F\\u2028-\\u202E\\u2060-\\u206F\\uFEFF\\uFFF9-\\uFFFB';

/** The `pattern` of every `name` of a profile in openapi.yaml (a test checks that they are the same). */
export const PROFILE_NAME_PATTERN = `^[^${REFUSED}]*$`;

/** Any one refused character (global: for removing them from names the service did not choose). */
export const REFUSED_NAME_CHARACTERS = new RegExp(`[${REFUSED}]`, 'gu');
