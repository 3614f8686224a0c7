import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { describe, expect, it } from 'vitest';
import { retiredTwinMigrations, TWIN_MIGRATION_NAMES } from '../../shared/migrations';
import { localCloudMigrations } from '../../local/cloud/local-cloud.migrations';
import { durableMigrations } from '../../local/durable/durable.migrations';
import { localIacMigrations } from '../../local/engine/stack-state.migrations';

/**
 * The twin stays out of what is deployed: the Function App package (package.json `main` and every file the build
 * compiles, tsconfig.build.json) and the runner image (infra/runner/Dockerfile: runner/main.ts and the folders its
 * .dockerignore lets in) load no file of local/, following every static import, `import()` and `require()`.
 */
const ROOT = resolve(__dirname, '../..');
const TWIN = `local${sep}`;

/** The repository's files `entry` loads, transitively (relative paths; packages are not followed). */
function loadedFiles(entry: string): string[] {
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const text = readFileSync(join(ROOT, file), 'utf8');
    for (const [, specifier] of text.matchAll(/(?:from\s+|import\s*\(\s*|require\s*\(\s*|import\s+)['"](\.{1,2}\/[^'"]+)['"]/g)) {
      const target = resolveModule(join(ROOT, dirname(file)), specifier ?? '');
      if (target) visit(relative(ROOT, target));
    }
  };
  visit(entry);
  return [...seen].sort();
}

function resolveModule(from: string, specifier: string): string | undefined {
  const base = resolve(from, specifier.replace(/\.js$/, ''));
  return [`${base}.ts`, `${base}.cjs`, `${base}.json`, join(base, 'index.ts'), base].find((candidate) => existsSync(candidate) && !candidate.endsWith(sep));
}

function filesUnder(folder: string): string[] {
  return readdirSync(join(ROOT, folder), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => relative(ROOT, join(entry.parentPath, entry.name)));
}

describe('the twin boundary', () => {
  it('when the Function App is built, then neither its entry nor any file it compiles is of the twin', () => {
    const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { main: string };
    const build = JSON.parse(readFileSync(join(ROOT, 'tsconfig.build.json'), 'utf8')) as { include: string[]; exclude: string[] };
    const entry = manifest.main.replace(/^dist\//, '').replace(/\.js$/, '.ts');
    const loaded = loadedFiles(entry);
    const compiled = build.include.flatMap(filesUnder);

    expect(entry).toBe('functions/index.ts');
    expect(loaded.length).toBeGreaterThan(100);
    expect(loaded.filter((f) => f.startsWith(TWIN) || f.startsWith(`tests${sep}`))).toEqual([]);
    expect(build.exclude).toContain('local');
    expect(compiled.filter((f) => f.startsWith(TWIN))).toEqual([]);
    // What the entry loads is inside what the build compiles (so the package runs as built).
    expect(loaded.filter((f) => !build.include.some((folder) => f.startsWith(`${folder}${sep}`)))).toEqual([]);
  });

  it('when the runner image is built, then what its entry loads is runner/ and shared/platform/ only, none of the twin', () => {
    const dockerignore = readFileSync(join(ROOT, 'infra/runner/Dockerfile.dockerignore'), 'utf8');
    const dockerfile = readFileSync(join(ROOT, 'infra/runner/Dockerfile'), 'utf8');
    const loaded = loadedFiles('runner/main.ts');

    expect(dockerfile).toContain('ENTRYPOINT ["node", "dist/runner/main.js"]');
    expect(dockerignore).not.toMatch(/^!local/m);
    expect(loaded.length).toBeGreaterThan(20);
    expect(loaded.filter((f) => !f.startsWith(`runner${sep}`) && !f.startsWith(`shared${sep}platform${sep}`))).toEqual([]);
  });

  it('when the product migrates a store, then it records the names of the twin migrations that once ran in it, and runs none', () => {
    const twinNames = [durableMigrations, localCloudMigrations, localIacMigrations].flatMap((source) => Object.keys(source('sqlite'))).sort();

    expect([...TWIN_MIGRATION_NAMES].sort()).toEqual(twinNames);
    expect(Object.keys(retiredTwinMigrations('postgres')).sort()).toEqual(twinNames);
  });
});
