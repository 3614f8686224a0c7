import ignore from 'ignore';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * `.funcignore` read with `ignore`, a gitignore-syntax matcher (the one the Azure Functions GitHub action uses; here
 * it comes with eslint and isomorphic-git, so nothing is added). A path it ignores is not uploaded by a publish.
 */
const root = join(__dirname, '../..');
const funcignore = ignore().add(readFileSync(join(root, '.funcignore'), 'utf8'));
const uploaded = (path: string) => !funcignore.ignores(path);

describe('.funcignore', () => {
  it.each([
    '.runtime-cloud/keys/local-issuer.jwk.json',
    '.runtime-cloud/runtime-cloud.sqlite',
    '.runtime-cloud/desired-state.git/HEAD',
    'dist/.runtime-cloud/keys/local-issuer.jwk.json',
    'tests/unit/auth.test.ts',
    'tests/support/local-host.ts',
    'local.settings.json',
    'local.settings.sample.json',
    '.tmp/vitest-report.json',
    '.git/config',
    '.gitignore',
    '.github/workflows/ci.yml',
    '.azurite/__azurite_db_table__.json',
    '__azurite_db_blob__.json',
    'coverage/index.html',
    'local/cli.ts',
    'console/src/main.tsx',
    'shared/deps.ts',
    'functions/index.ts',
    'infra/index.ts',
    'infra/node_modules/@pulumi/pulumi/package.json',
    'bin/runtime-cloud.js',
    'README.md',
    'docs/architecture.md',
    'package-lock.json',
    'tsconfig.json',
  ])('when a publish meets %s, then it is left out', (path) => {
    expect(uploaded(path)).toBe(false);
  });

  it.each([
    'dist/functions/index.js',
    'dist/shared/deps.js',
    // The operator console, built by npm run build and served by functions/host/console.ts.
    'dist/console/index.html',
    'dist/console/assets/index-0a1b2c3d.js',
    'host.json',
    'package.json',
    'node_modules/@azure/functions/package.json',
    'node_modules/better-sqlite3/build/Release/better_sqlite3.node',
    // Folders that share a name with root folders left out: the root-only patterns keep them.
    'node_modules/some-package/tests/index.js',
    'node_modules/some-package/local/index.js',
  ])('when a publish meets %s, then it is uploaded', (path) => {
    expect(uploaded(path)).toBe(true);
  });

  it("when package.json's main is matched, then the entry the Functions host loads is uploaded", () => {
    const { main } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { main: string };
    expect(uploaded(main)).toBe(true);
  });

  it('when the repository root is listed, then only dist/, host.json, package.json and node_modules/ would be uploaded', () => {
    const entries = readdirSync(root, { withFileTypes: true }).map((entry) => (entry.isFile() ? entry.name : `${entry.name}/`));
    const expected = ['dist/', 'host.json', 'package.json', 'node_modules/'].filter((entry) => entries.includes(entry));
    expect(entries.filter(uploaded).sort()).toEqual(expected.sort());
  });
});
