import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { functionAppEntryPoints, globRegExp } from '../../local/function-app';

describe('a Functions app main, as the Functions host resolves it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rch-main-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('when main is a glob, then * stays within a folder, ** spans folders and {a,b} is either', () => {
    expect(globRegExp('dist/src/functions/*.js').test('dist/src/functions/hello.js')).toBe(true);
    expect(globRegExp('dist/src/functions/*.js').test('dist/src/functions/deep/hello.js')).toBe(false);
    expect(globRegExp('dist/**/*.js').test('dist/a/b/c.js')).toBe(true);
    expect(globRegExp('dist/**/*.js').test('dist/c.js')).toBe(true);
    expect(globRegExp('dist/{index.js,functions/*.js}').test('dist/functions/x.js')).toBe(true);
    expect(globRegExp('dist/{index.js,functions/*.js}').test('dist/other.js')).toBe(false);
    expect(globRegExp('dist/?.js').test('dist/a.js')).toBe(true);
    expect(globRegExp('dist/?.js').test('dist/ab.js')).toBe(false);
    expect(globRegExp('dist/*.js').test('dist/a.jsx')).toBe(false);
    expect(globRegExp('dist/*.js').test('dist/.hidden.js')).toBe(true);
  });

  it('when the sample app is read, then its main glob (src/*.js) finds every function file, in name order', () => {
    const app = join(__dirname, '..', 'apps', 'durable-sample');
    const files = readdirSync(join(app, 'src')).filter((f) => f.endsWith('.js')).sort();
    expect(files).toContain('hello.js');
    expect(functionAppEntryPoints(app).map((f) => basename(f))).toEqual(files);
  });

  it('when main matches nothing or is missing, then it is an error, never an empty app', () => {
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ main: 'dist/*.js' }));
    expect(() => functionAppEntryPoints(dir)).toThrow(/matches no file/);
    writeFileSync(join(dir, 'package.json'), JSON.stringify({}));
    expect(() => functionAppEntryPoints(dir)).toThrow(/has no "main"/);
  });
});
