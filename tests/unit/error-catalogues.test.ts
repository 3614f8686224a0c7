import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PROBLEM_CATALOGUES } from '../../functions/http/openapi';
import { CapacityErrors } from '../../shared/capacity/errors';
import { InventoryErrors } from '../../shared/inventory/errors';
import type { ProblemEntry } from '../../shared/platform/errors/catalogue';
import { STATUS_BY_KIND } from '../../shared/platform/http/problem';
import { ExternalErrors, UNAVAILABLE_CODES } from '../../shared/provisioning/external-services.client';
import { ProvisioningErrors } from '../../shared/provisioning/errors';
import { PackageErrors } from '../../shared/provisioning/package-policy';
import { ProjectErrors } from '../../shared/provisioning/project-policy';
import { RunErrors } from '../../shared/provisioning/run';
import { JobErrors } from '../../shared/provisioning/runner-jobs';
import { SourceErrors } from '../../shared/provisioning/source-policy';

const root = join(__dirname, '../..');
/** The modules' own codes: each module's catalogue must hold every one of its codes that a product file throws. */
const MODULE_CODE = /^(CAPACITY|INVENTORY|PROVISIONING|RUNNER)\./;
/** The code constants a throw site may name instead of a catalogue entry (they are run outcomes too). */
const CONSTANTS: Record<string, Readonly<Record<string, string>>> = { RunErrors, ExternalErrors, JobErrors, PackageErrors, ProjectErrors, SourceErrors };

const catalogue = new Map<string, ProblemEntry>();
for (const entries of [CapacityErrors, InventoryErrors, ProvisioningErrors] as const) {
  for (const entry of Object.values(entries) as ProblemEntry[]) catalogue.set(entry.code, entry);
}

function productFiles(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => relative(root, join(e.parentPath, e.name)));
}

/**
 * The three modules' files and their HTTP functions. (The engine in shared/platform/iac and the agent in runner/
 * throw codes of their own, which end runs rather than answer requests.)
 */
const MODULE_DIRS = ['shared/capacity', 'shared/inventory', 'shared/provisioning', 'functions/capacity', 'functions/inventory', 'functions/provisioning'];

/** Every `new AppError(code, kind, …)` of the modules: where, the code's expression and the kind. */
function appErrorSites(): { file: string; code: string; kind: string }[] {
  const sites: { file: string; code: string; kind: string }[] = [];
  for (const file of MODULE_DIRS.flatMap(productFiles)) {
    const text = readFileSync(join(root, file), 'utf8');
    for (const m of text.matchAll(/new AppError\(\s*([^,()]+?),\s*'([a-z-]+)'/g)) sites.push({ file, code: m[1]!.trim(), kind: m[2]! });
  }
  return sites;
}

/** The code a site's expression names: a literal, or a member of one of the code constants. */
function codeOf(expression: string): string | undefined {
  const literal = /^'([^']+)'$/.exec(expression);
  if (literal) return literal[1];
  const [object, member] = expression.split('.');
  return object !== undefined && member !== undefined ? CONSTANTS[object]?.[member] : undefined;
}

describe('the error catalogues', () => {
  const openapi = JSON.parse(readFileSync(join(root, 'openapi.json'), 'utf8')) as { components: { 'x-problem-types': Record<string, { type: string; status: number; title: string }> } };

  it("when a product file throws a module's code, then the module's catalogue holds it with the same kind, and the site names it through the catalogue", () => {
    const sites = appErrorSites();
    expect(sites.length).toBeGreaterThan(20);
    const moduleSites = sites.map((s) => ({ ...s, resolved: codeOf(s.code) })).filter((s) => s.resolved !== undefined && MODULE_CODE.test(s.resolved) && !/\/local-[^/]*$/.test(s.file));
    expect(moduleSites.filter((s) => catalogue.get(s.resolved!)?.kind !== s.kind).map((s) => `${s.file}: ${s.resolved} ${s.kind}`)).toEqual([]);
    // A string literal at a throw site is how a code escapes its catalogue: named constants only.
    expect(moduleSites.filter((s) => s.code.startsWith("'")).map((s) => `${s.file}: ${s.code}`)).toEqual([]);
  });

  it('when a step throws a code it computes (a fail-fast service, a refused source), then every code it can throw is catalogued', () => {
    for (const code of [...UNAVAILABLE_CODES, ExternalErrors.configUnavailable, ...Object.values(SourceErrors)]) expect(catalogue.has(code), code).toBe(true);
  });

  it('when the OpenAPI document is built, then it lists every catalogued problem with its type, status and title, and nothing else', () => {
    expect(PROBLEM_CATALOGUES).toEqual([CapacityErrors, InventoryErrors, ProvisioningErrors]);
    const documented = openapi.components['x-problem-types'];
    expect(Object.keys(documented).sort()).toEqual([...catalogue.keys()].sort());
    for (const entry of catalogue.values()) {
      expect(documented[entry.code]).toEqual({ type: `https://runtime-cloud.dev/problems/${entry.code.toLowerCase().replace(/[._]/g, '-')}`, status: STATUS_BY_KIND[entry.kind], title: entry.title });
    }
  });

  it("when a catalogue is read, then each code starts with its module's prefix and is listed once", () => {
    const codes = [...Object.values(CapacityErrors), ...Object.values(InventoryErrors), ...Object.values(ProvisioningErrors)].map((e: ProblemEntry) => e.code);
    expect(new Set(codes).size).toBe(codes.length);
    expect(Object.values(CapacityErrors).every((e) => e.code.startsWith('CAPACITY.'))).toBe(true);
    expect(Object.values(InventoryErrors).every((e) => e.code.startsWith('INVENTORY.'))).toBe(true);
    expect(Object.values(ProvisioningErrors).every((e) => /^(PROVISIONING|RUNNER)\./.test(e.code))).toBe(true);
  });
});
