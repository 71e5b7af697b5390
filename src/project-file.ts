import { existsSync } from 'node:fs';
import path from 'node:path';

// The project's root: the nearest directory above this module that holds package.json. The same
// whether the module runs from src/ (Node's type stripping) or from the build under dist/src/.
let root = import.meta.dirname;
while (!existsSync(path.join(root, 'package.json'))) {
  const parent = path.dirname(root);
  if (parent === root) throw new Error(`no package.json above ${import.meta.dirname}`);
  root = parent;
}

/** The absolute path of a file given relative to the project's root (for example 'openapi.yaml'). */
export function projectFile(relative: string): string {
  return path.join(root, relative);
}
