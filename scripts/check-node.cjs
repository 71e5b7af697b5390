// Stops `npm start`, `npm run dev` and `npm test` on a Node the project does not support, with one line
// that says what to do. Plain CommonJS with no dependencies on purpose: it must run on any Node, old ones
// included. (`npm install` itself is stopped by `engine-strict` in .npmrc, before it installs anything.)
'use strict';
const { engines } = require('../package.json');

/** Whether `version` (x.y.z) satisfies `range`: alternatives (`||`) of `^x.y.z` or `>=x.y.z`. */
function satisfies(version, range) {
  const parse = (v) => v.split('.').map(Number);
  const compare = (a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2];
  const have = parse(version);
  return range.split('||').some((part) => {
    const m = /^\s*(\^|>=)(\d+\.\d+\.\d+)\s*$/.exec(part);
    if (!m) throw new Error(`scripts/check-node.cjs: unsupported range "${part.trim()}" in package.json engines`);
    const want = parse(m[2]);
    return compare(have, want) >= 0 && (m[1] === '>=' || have[0] === want[0]);
  });
}

module.exports = { satisfies };

if (require.main === module) {
  const version = process.versions.node;
  if (!satisfies(version, engines.node)) {
    console.error(`Node ${version} cannot run this project (it needs ${engines.node}): ${engines.fix}`);
    process.exit(1);
  }
}
