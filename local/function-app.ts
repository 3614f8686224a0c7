import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';
import picomatch from 'picomatch';

/**
 * The files a Functions v4 Node app registers its functions from, as the Functions host finds them: the app's
 * package.json `main`, a file or a glob (`dist/src/functions/*.js`, `dist/**\/*.js`, `{a.js,b.js}`), relative to the
 * app's folder. An app whose main matches nothing is an error, never an empty app.
 */
export function functionAppEntryPoints(appDir: string): string[] {
  const manifest = JSON.parse(readFileSync(join(appDir, 'package.json'), 'utf8')) as { main?: unknown };
  if (typeof manifest.main !== 'string' || manifest.main.trim() === '') {
    throw new Error(`${join(appDir, 'package.json')} has no "main": the host cannot know which files register the functions`);
  }
  const main = manifest.main.replace(/^\.\//, '');
  if (!picomatch.scan(main).isGlob) {
    const file = resolve(appDir, main);
    if (!existsSync(file)) throw new Error(`the app's main ${main} does not exist in ${appDir}`);
    return [file];
  }
  const pattern = globRegExp(main);
  const files = walk(appDir)
    .filter((file) => pattern.test(relative(appDir, file).split(sep).join('/')))
    .sort();
  if (files.length === 0) throw new Error(`the app's main ${main} matches no file in ${appDir}`);
  return files;
}

function walk(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules' || entry.name.startsWith('.')) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...walk(path));
    else if (entry.isFile()) out.push(path);
  }
  return out;
}

/**
 * A glob as a regular expression over `/`-separated relative paths (picomatch): `**` any folders, `*` and `?` within
 * one, `{a,b}`; names starting with a dot match too, as the host's glob does.
 */
export function globRegExp(glob: string): RegExp {
  return picomatch.makeRe(glob, { dot: true });
}
