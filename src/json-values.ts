/** Checks on JSON values received from clients, before they reach the database. */

interface WalkNode {
  value: unknown;
  key: string | number | undefined;
  parent: WalkNode | undefined;
}

function pathOf(node: WalkNode, root: string): string {
  const parts: string[] = [];
  for (let n: WalkNode | undefined = node; n?.parent !== undefined; n = n.parent) {
    parts.push(typeof n.key === 'number' ? `[${n.key}]` : `.${String(n.key)}`);
  }
  return root + parts.reverse().join('');
}

/**
 * The path of the first string (a value or a property name) in a JSON value that PostgreSQL cannot
 * store (NUL, or an unpaired surrogate), or of binary data, which is not JSON at all (socket.io
 * carries it; HTTP bodies cannot). Walks with an explicit stack, not recursion: a body of deeply
 * nested arrays (a few bytes per level) must not exhaust the call stack, and paths are built only for
 * the one found.
 */
export function findUnstorableString(value: unknown, path = 'body'): string | undefined {
  const stack: WalkNode[] = [{ value, key: undefined, parent: undefined }];
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    const v = node.value;
    if (typeof v === 'string') {
      if (!isStorable(v)) return pathOf(node, path);
    } else if (v instanceof ArrayBuffer || ArrayBuffer.isView(v)) {
      return pathOf(node, path);
    } else if (Array.isArray(v)) {
      // Pushed in reverse so that items are visited in order (the first offending path is reported).
      for (let i = v.length - 1; i >= 0; i--) stack.push({ value: v[i], key: i, parent: node });
    } else if (v !== null && typeof v === 'object') {
      const entries = Object.entries(v);
      for (let i = entries.length - 1; i >= 0; i--) {
        const [key, item] = entries[i] as [string, unknown];
        if (!isStorable(key)) return pathOf({ value: key, key, parent: node }, path);
        stack.push({ value: item, key, parent: node });
      }
    }
  }
  return undefined;
}

const isStorable = (s: string): boolean => !s.includes('\u0000') && s.isWellFormed();
