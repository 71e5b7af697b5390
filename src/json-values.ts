/** Checks on JSON values received from clients, before they reach the database. */

/**
 * How deeply objects and arrays may nest in a request (the request's own object is level 1). Deeper
 * values are refused: serializing, storing and every client's parsing of them would recurse once per
 * level, and no message or profile needs more.
 */
export const MAX_JSON_DEPTH = 32;

/** What is wrong with a JSON value from a client, and where (`body.payload.a[2]`). */
export interface JsonProblem {
  path: string;
  /** `unstorable`: NUL or an unpaired surrogate; `binary`: bytes, which are not JSON; `depth`: past MAX_JSON_DEPTH. */
  kind: 'unstorable' | 'binary' | 'depth';
}

interface WalkNode {
  value: unknown;
  key: string | number | undefined;
  parent: WalkNode | undefined;
  /** How many objects and arrays enclose this value. */
  depth: number;
}

function pathOf(node: WalkNode, root: string): string {
  const parts: string[] = [];
  for (let n: WalkNode | undefined = node; n?.parent !== undefined; n = n.parent) {
    parts.push(typeof n.key === 'number' ? `[${n.key}]` : `.${String(n.key)}`);
  }
  const path = parts.reverse().join('');
  return root === '' ? path.replace(/^\./, '') : root + path;
}

/**
 * The first problem of a JSON value, in document order: a string (value or property name) that
 * PostgreSQL cannot store, binary data (socket.io carries it; HTTP bodies cannot), or an object or
 * array nested deeper than `maxDepth`. `root` names the value in paths ('' for none). Walks with an
 * explicit stack, not recursion, so that no depth can exhaust the call stack. The common case, no
 * problem, takes one walk that allocates nothing per value; only when there is a problem does a
 * second walk find its path.
 */
export function findJsonProblem(value: unknown, root = 'body', maxDepth = MAX_JSON_DEPTH): JsonProblem | undefined {
  return hasProblem(value, maxDepth) ? locateProblem(value, root, maxDepth) : undefined;
}

/** Whether the value has any problem findJsonProblem reports (values and their depths on two stacks). */
function hasProblem(value: unknown, maxDepth: number): boolean {
  const values: unknown[] = [value];
  const depths: number[] = [0];
  while (values.length > 0) {
    const v = values.pop();
    const depth = (depths.pop() as number) + 1;
    if (typeof v === 'string') {
      if (!isStorable(v)) return true;
    } else if (v !== null && typeof v === 'object') {
      if (depth > maxDepth || v instanceof ArrayBuffer || ArrayBuffer.isView(v)) return true;
      if (Array.isArray(v)) {
        for (const item of v) {
          if (item !== null && typeof item === 'object') {
            values.push(item);
            depths.push(depth);
          } else if (typeof item === 'string' && !isStorable(item)) {
            return true;
          }
        }
      } else {
        for (const key in v) {
          if (!isStorable(key)) return true;
          const item = (v as Record<string, unknown>)[key];
          if (item !== null && typeof item === 'object') {
            values.push(item);
            depths.push(depth);
          } else if (typeof item === 'string' && !isStorable(item)) {
            return true;
          }
        }
      }
    }
  }
  return false;
}

function locateProblem(value: unknown, root: string, maxDepth: number): JsonProblem | undefined {
  const stack: WalkNode[] = [{ value, key: undefined, parent: undefined, depth: 0 }];
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    const v = node.value;
    if (typeof v === 'string') {
      if (!isStorable(v)) return { path: pathOf(node, root), kind: 'unstorable' };
    } else if (v instanceof ArrayBuffer || ArrayBuffer.isView(v)) {
      return { path: pathOf(node, root), kind: 'binary' };
    } else if (v !== null && typeof v === 'object') {
      const depth = node.depth + 1;
      if (depth > maxDepth) return { path: pathOf(node, root), kind: 'depth' };
      if (Array.isArray(v)) {
        // Pushed in reverse so that items are visited in order (the first problem is reported).
        for (let i = v.length - 1; i >= 0; i--) stack.push({ value: v[i], key: i, parent: node, depth });
      } else {
        const entries = Object.entries(v);
        for (let i = entries.length - 1; i >= 0; i--) {
          const [key, item] = entries[i] as [string, unknown];
          if (!isStorable(key))
            return { path: pathOf({ value: key, key, parent: node, depth }, root), kind: 'unstorable' };
          stack.push({ value: item, key, parent: node, depth });
        }
      }
    }
  }
  return undefined;
}

/**
 * A sentence that may quote names a client chose, made fit for an error message: NUL and unpaired
 * surrogates (which the Error schema's `message` refuses, and which no client could print) and the
 * other control characters (which could rewrite a terminal showing the log) become `\uXXXX`.
 */
export function printable(sentence: string): string {
  return sentence.replace(
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
    /[\u0000-\u001f\u007f-\u009f]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/** The problem as a sentence for an error message. */
export function describeJsonProblem(problem: JsonProblem): string {
  return printable(problemSentence(problem));
}

function problemSentence(problem: JsonProblem): string {
  switch (problem.kind) {
    case 'unstorable':
      return `${problem.path} contains a NUL character or an unpaired UTF-16 surrogate`;
    case 'binary':
      return `${problem.path} is binary data, which is not JSON`;
    case 'depth':
      return `${problem.path} nests objects and arrays more than ${MAX_JSON_DEPTH} levels deep`;
  }
}

const isStorable = (s: string): boolean => !s.includes('\u0000') && s.isWellFormed();

/** Keys that name an object's prototype in JavaScript; refused in message payloads (see findPrototypeKey). */
const PROTOTYPE_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

/**
 * The path (`body.payload.a[2].constructor`) of the first key named `__proto__`, `constructor` or
 * `prototype` at any depth of `value`, or undefined. Such keys reach every subscriber's JavaScript,
 * where merging them into an object changes its prototype; a realtime payload may not have them,
 * on the socket as over HTTP. Walks with an explicit stack (the depth is bounded before this runs).
 */
export function findPrototypeKey(value: unknown, root: string): string | undefined {
  const stack: Array<{ value: unknown; path: string }> = [{ value, path: root }];
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    const v = node.value;
    if (v === null || typeof v !== 'object') continue;
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ value: v[i], path: `${node.path}[${i}]` });
      continue;
    }
    const keys = Object.keys(v);
    for (const key of keys) if (PROTOTYPE_KEYS.has(key)) return `${node.path}.${key}`;
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i] as string;
      stack.push({ value: (v as Record<string, unknown>)[key], path: `${node.path}.${key}` });
    }
  }
  return undefined;
}

/** The refusal message for a payload with a prototype key (findPrototypeKey), or undefined when it has none. */
export function prototypeKeyProblem(value: unknown, root: string): string | undefined {
  const path = findPrototypeKey(value, root);
  return path === undefined
    ? undefined
    : printable(`${path}: keys named __proto__, constructor or prototype are not allowed`);
}
