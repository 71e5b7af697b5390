/** What the service knows about a model before calling anyone. */
export interface ModelInfo {
  /** Size of the vectors the model produces; undefined when the model is not in the catalogue. */
  nativeDimensions: number | undefined;
  /** Whether `dimensions` may shorten its vectors. */
  shortenable: boolean;
  /** Served in-process (models named `local/...`). */
  local: boolean;
}

/** The in-process model (see local-model.ts). */
export const LOCAL_MODEL = 'local/lexical-v1';
export const LOCAL_MODEL_DIMENSIONS = 512;

// OpenAI's embedding models, as OpenAI (plain names) and OpenRouter ("openai/..." names) call them.
const knownUpstream: Record<string, { nativeDimensions: number; shortenable: boolean }> = {
  'text-embedding-3-small': { nativeDimensions: 1536, shortenable: true },
  'text-embedding-3-large': { nativeDimensions: 3072, shortenable: true },
  'text-embedding-ada-002': { nativeDimensions: 1536, shortenable: false },
};

export const localModels: readonly string[] = [LOCAL_MODEL];

export function isLocalModel(model: string): boolean {
  return model.startsWith('local/');
}

/** The catalogue entry of `model`; undefined for an unknown `local/...` name. */
export function modelInfo(model: string): ModelInfo | undefined {
  if (isLocalModel(model)) {
    return model === LOCAL_MODEL
      ? { nativeDimensions: LOCAL_MODEL_DIMENSIONS, shortenable: true, local: true }
      : undefined;
  }
  const known = knownUpstream[model.replace(/^openai\//, '')];
  return known ? { ...known, local: false } : { nativeDimensions: undefined, shortenable: true, local: false };
}
