// The entry point of `npm start`. It is JavaScript so that Node's compile cache is on before any
// TypeScript is read: Node then finds every module, src/server.ts included, already type-stripped
// and compiled in the cache (NODE_COMPILE_CACHE, else a folder in the system's temporary
// directory), and does not load its TypeScript stripper at all. That saves about a third of a
// start and some 15 MB of resident memory; a first start after an install or a change fills it.
import module from 'node:module';

module.enableCompileCache?.();
await import('./server.ts');
