import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The operator console's build (console/ into dist/console, as `npm run build` makes it), made again only when a
 * source file, openapi.json or the package lock is newer than it: `npm start` runs this first, and so does the
 * console's browser test.
 */
const ROOT = join(__dirname, '..');
const OUT = join(ROOT, 'dist', 'console', 'index.html');
const SOURCES = [join(ROOT, 'console'), join(ROOT, 'openapi.json'), join(ROOT, 'package-lock.json')];

export function consoleBuilt(): boolean {
  return existsSync(OUT);
}

function newest(path: string): number {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  return Math.max(stat.mtimeMs, ...readdirSync(path).map((name) => newest(join(path, name))));
}

export async function buildConsoleIfStale(): Promise<'built' | 'fresh'> {
  if (consoleBuilt() && statSync(OUT).mtimeMs >= Math.max(...SOURCES.map(newest))) return 'fresh';
  const { build } = await import('vite');
  await build({ configFile: join(ROOT, 'console', 'vite.config.mts'), logLevel: 'warn' });
  return 'built';
}

if (require.main === module) {
  buildConsoleIfStale().then(
    (outcome) => process.stdout.write(`the operator console: ${outcome === 'built' ? 'built into dist/console' : 'dist/console is up to date'}\n`),
    (error: unknown) => {
      process.stderr.write(`the operator console could not be built: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exitCode = 1;
    },
  );
}
