/**
 * Builds the typed client as an installable package in sdk/: compiles src/client and the generated
 * types it imports (sdk/tsconfig.json) into sdk/dist/ as ES modules with type declarations. The
 * sources stay in src/client; sdk/ holds only the package's manifest, README, compiler settings and
 * examples. `npm pack ./sdk` runs it first (sdk/package.json's prepack); the tarball holds dist/,
 * README.md and package.json only.
 *
 *   node scripts/build-sdk.ts                       # into sdk/dist/
 *   node scripts/build-sdk.ts --package-dir <dir>   # sdk/ copied to <dir> (without dist/), built into <dir>/dist/
 *
 * Before compiling it checks that sdk/package.json carries the service's version and engines and the
 * root's ranges of the dependencies they share; it exits 1 on any difference, naming it.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const sdkDir = path.join(root, 'sdk');
const { values: args } = parseArgs({ options: { 'package-dir': { type: 'string' } } });
const packageDir = path.resolve(args['package-dir'] ?? sdkDir);
const distDir = path.join(packageDir, 'dist');

interface Manifest {
  name: string;
  version: string;
  engines?: Record<string, string>;
  dependencies?: Record<string, string>;
}

const readManifest = (file: string) => JSON.parse(fs.readFileSync(file, 'utf8')) as Manifest;

/** What differs between the SDK's manifest and the service's, as sentences. */
function manifestMismatches(service: Manifest, sdk: Manifest): string[] {
  const problems: string[] = [];
  if (sdk.version !== service.version) {
    problems.push(`version is ${sdk.version}, the service's is ${service.version}`);
  }
  if (sdk.engines?.node !== service.engines?.node) {
    problems.push(`engines.node is "${sdk.engines?.node}", the service's is "${service.engines?.node}"`);
  }
  for (const [name, range] of Object.entries(sdk.dependencies ?? {})) {
    const serviceRange = service.dependencies?.[name];
    if (serviceRange === undefined) problems.push(`dependency ${name} is not a dependency of the service`);
    else if (serviceRange !== range)
      problems.push(`dependency ${name} is "${range}", the service has "${serviceRange}"`);
  }
  return problems;
}

/** Every file under `dir`, as absolute paths. */
function filesUnder(dir: string): string[] {
  return fs
    .readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => path.join(entry.parentPath, entry.name));
}

// tsc rewrites the `.ts` of relative imports in the JavaScript it emits, not in declarations.
const RELATIVE_TS_SPECIFIER = /((?:from|import)\s*\(?\s*)(['"])(\.{1,2}\/[^'"]*?)\.ts\2/g;

/**
 * Makes dist/ a package: relative `.ts` specifiers in declarations become `.js` (what the emitted
 * modules are called), and the empty modules of type-only sources are removed (nothing imports them
 * at run time; their declarations stay).
 */
function finishDist(): void {
  for (const file of filesUnder(distDir)) {
    const text = fs.readFileSync(file, 'utf8');
    if (file.endsWith('.d.ts')) {
      const rewritten = text.replace(RELATIVE_TS_SPECIFIER, '$1$2$3.js$2');
      if (rewritten !== text) fs.writeFileSync(file, rewritten);
    } else if (file.endsWith('.js') && text.trim() === 'export {};') {
      fs.rmSync(file);
    }
  }
}

const service = readManifest(path.join(root, 'package.json'));
const sdk = readManifest(path.join(sdkDir, 'package.json'));
const problems = manifestMismatches(service, sdk);
if (problems.length > 0) {
  console.error(`sdk/package.json does not match the service's package.json:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}

fs.rmSync(distDir, { recursive: true, force: true });
if (packageDir !== sdkDir) {
  fs.cpSync(sdkDir, packageDir, { recursive: true, filter: (source) => source !== path.join(sdkDir, 'dist') });
  // The copy is built here and now: packing it must not run sdk/'s prepack (which builds sdk/ itself).
  const copied = JSON.parse(fs.readFileSync(path.join(packageDir, 'package.json'), 'utf8')) as {
    scripts?: Record<string, string>;
  };
  delete copied.scripts;
  fs.writeFileSync(path.join(packageDir, 'package.json'), `${JSON.stringify(copied, null, 2)}\n`);
}
const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const compiled = spawnSync(process.execPath, [tsc, '-p', path.join(sdkDir, 'tsconfig.json'), '--outDir', distDir], {
  cwd: root,
  stdio: 'inherit',
});
if (compiled.status !== 0) {
  console.error(`build-sdk: tsc failed (${compiled.status ?? compiled.signal})`);
  process.exit(1);
}
finishDist();

const files = filesUnder(distDir).sort();
const bytes = files.reduce((sum, file) => sum + fs.statSync(file).size, 0);
console.log(
  `${sdk.name}@${sdk.version}: ${files.length} files (${Math.round(bytes / 1024)} KiB) in ${path.relative(process.cwd(), distDir) || '.'}`,
);
for (const file of files) console.log(`  ${path.relative(packageDir, file)}`);
