import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AccessToken, GetTokenOptions, TokenCredential } from '@azure/core-auth';
import { createHttpHeaders, type HttpClient, type PipelineRequest, type PipelineResponse } from '@azure/core-rest-pipeline';
import { describe, expect, it } from 'vitest';
import { ensureSecretsKey, firstEnabledVersion, pulumiSettingsOf, secretsKeyOf, withTenantBackend } from '../../runner/state-backend';
import type { IacEngine } from '../../shared/platform/iac/iac-runner';
import { backendOfTenant } from '../../shared/platform/config/targets';
import { refusal } from '../support/refusal';

/**
 * A runner agent makes each tenant's Pulumi secrets key on its target's Key Vault before the tenant's first job, and
 * pins its first version (issue 17). Key Vault cannot run here: the real `@azure/keyvault-keys` SDK runs (its
 * challenge authentication, paging and parsing) and only its transport answers, with what Key Vault answered in the
 * Azure SDK team's recordings against a live vault (the published fixtures, docs/testing.md, "Published fixtures").
 */
const FIXTURES = join(__dirname, '..', '..', '..', 'shared', 'fixtures', 'keyvault');
const RECORDINGS = ['list-0-versions-of-a-nonexisting-key', 'create-a-rsa-key-with-size', 'get-the-versions-of-a-key'];
const present = existsSync(FIXTURES) && RECORDINGS.every((name) => readdirSync(FIXTURES).includes(`azure-sdk-for-js.keys.${name}.json`));
if (!present) console.warn(`skipped: the published Key Vault recordings are not at ${FIXTURES} (the published fixtures: docs/testing.md)`);

interface Entry {
  readonly RequestUri: string;
  readonly RequestMethod: string;
  readonly RequestHeaders: Record<string, string>;
  readonly StatusCode: number;
  readonly ResponseHeaders: Record<string, string>;
  readonly ResponseBody: unknown;
}
const recording = (name: string): Entry[] => (JSON.parse(readFileSync(join(FIXTURES, `azure-sdk-for-js.keys.${name}.json`), 'utf8')) as { Entries: Entry[] }).Entries;

type Operation = 'versions' | 'create';
const operationOf = (method: string, url: string): Operation | undefined => {
  const path = new URL(url).pathname;
  if (method === 'GET' && /^\/keys\/[^/]+\/versions$/.test(path)) return 'versions';
  if (method === 'POST' && /^\/keys\/[^/]+\/create$/.test(path)) return 'create';
  return undefined;
};
const recorded = (entries: Entry[], operation: Operation, status: number): Entry => {
  const found = entries.find((e) => operationOf(e.RequestMethod, e.RequestUri) === operation && e.StatusCode === status);
  if (!found) throw new Error(`no recorded ${operation} answered ${status}`);
  return found;
};

/**
 * A vault that answers as the recordings do: a call without a token gets the recorded challenge; listing a key's
 * versions gets the recorded empty list until the key was made, then the recorded list of a key's versions; making a
 * key gets the recorded key. Keys are kept apart by name, so two tenants' keys are two keys.
 */
function recordedVault() {
  const [empty, created, versions] = RECORDINGS.map(recording) as [Entry[], Entry[], Entry[]];
  const keys = new Set<string>();
  const calls: { method: string; path: string; authorized: boolean; body?: unknown }[] = [];
  const answer = (request: PipelineRequest, entry: Entry): PipelineResponse => ({
    request,
    status: entry.StatusCode,
    headers: createHttpHeaders(entry.ResponseHeaders),
    bodyAsText: entry.ResponseBody === null ? '' : JSON.stringify(entry.ResponseBody),
  });
  const client: HttpClient = {
    sendRequest: (request) => {
      const operation = operationOf(request.method, request.url);
      const path = new URL(request.url).pathname;
      const name = path.split('/')[2]!;
      const authorized = request.headers.has('authorization');
      calls.push({ method: request.method, path, authorized, ...(typeof request.body === 'string' ? { body: JSON.parse(request.body) as unknown } : {}) });
      if (!operation) return Promise.reject(new Error(`the recordings hold no answer to ${request.method} ${path}`));
      if (!authorized) return Promise.resolve(answer(request, recorded(operation === 'create' ? created : empty, operation, 401)));
      if (operation === 'create') {
        keys.add(name);
        return Promise.resolve(answer(request, recorded(created, 'create', 200)));
      }
      return Promise.resolve(answer(request, recorded(keys.has(name) ? versions : empty, 'versions', 200)));
    },
  };
  /** The versions the recording lists for the key, oldest first, as Key Vault reported them. */
  const recordedVersions = () =>
    versions
      .filter((e) => operationOf(e.RequestMethod, e.RequestUri) === 'versions' && e.StatusCode === 200)
      .flatMap((e) => (e.ResponseBody as { value: { kid: string; attributes: { created: number; enabled: boolean } }[] }).value)
      .map((v) => ({ version: v.kid.split('/').pop()!, created: v.attributes.created }));
  return { client, calls, keys, recordedVersions };
}

/** The agent's identity: it records the scopes it is asked for (the vault's challenge names them). */
function identity(): TokenCredential & { scopes: string[] } {
  const scopes: string[] = [];
  return {
    scopes,
    getToken: (scope: string | string[], _options?: GetTokenOptions): Promise<AccessToken> => {
      scopes.push(...(Array.isArray(scope) ? scope : [scope]));
      return Promise.resolve({ token: 'runner-token', expiresOnTimestamp: Date.now() + 3_600_000 });
    },
  };
}

const VAULT = 'keyvault_name.vault.azure.net';
const TEMPLATE = { url: 'azblob://state-{tenant}?storage_account=stprod', secretsProvider: `azurekeyvault://${VAULT}/keys/pulumi-{tenant}` };
const providerOf = (tenant: string) => backendOfTenant(TEMPLATE, tenant).secretsProvider!;

describe.skipIf(!present)("a tenant's Pulumi secrets key, against Key Vault as recorded", () => {
  it("when a tenant's first job comes, then its key is made (RSA 3072, encrypt and decrypt only) after the vault's challenge, and the provider names its first version", async () => {
    // Arrange
    const vault = recordedVault();
    const credential = identity();

    // Act
    const pinned = await ensureSecretsKey(providerOf('demo-team'), { credential, httpClient: vault.client });

    // Assert: listed, made, listed again, each call first without a token until the vault named its resource.
    expect(vault.calls.filter((c) => c.authorized).map((c) => `${c.method} ${c.path}`).slice(0, 3)).toEqual([
      'GET /keys/pulumi-demo-team/versions',
      'POST /keys/pulumi-demo-team/create',
      'GET /keys/pulumi-demo-team/versions',
    ]);
    expect(vault.calls[0]).toMatchObject({ authorized: false });
    expect(credential.scopes[0]).toBe('https://vault.azure.net/.default');
    expect(vault.calls.find((c) => c.method === 'POST' && c.authorized)?.body).toEqual({ kty: 'RSA', key_size: 3072, key_ops: ['encrypt', 'decrypt'], attributes: {} });
    const oldest = vault.recordedVersions().sort((a, b) => a.created - b.created)[0]!;
    expect(pinned).toBe(`azurekeyvault://${VAULT}/keys/pulumi-demo-team/${oldest.version}`);
  });

  it('when the key already exists, then none is made and the provider names its version', async () => {
    // Arrange
    const vault = recordedVault();
    vault.keys.add('pulumi-demo-team');

    // Act
    const pinned = await ensureSecretsKey(providerOf('demo-team'), { credential: identity(), httpClient: vault.client });

    // Assert
    expect(vault.calls.filter((c) => c.authorized).map((c) => `${c.method} ${c.path}`)).toEqual(['GET /keys/pulumi-demo-team/versions']);
    expect(pinned).toBe(`azurekeyvault://${VAULT}/keys/pulumi-demo-team/${vault.recordedVersions()[0]!.version}`);
  });

  it("when two tenants' first jobs come on one target, then each gets its own key, made once", async () => {
    // Arrange
    const vault = recordedVault();

    // Act
    for (const tenant of ['demo-team', 'tenant-b', 'demo-team', 'tenant-b']) await ensureSecretsKey(providerOf(tenant), { credential: identity(), httpClient: vault.client });

    // Assert
    expect(vault.calls.filter((c) => c.method === 'POST' && c.authorized).map((c) => c.path)).toEqual(['/keys/pulumi-demo-team/create', '/keys/pulumi-tenant-b/create']);
    expect([...vault.keys].sort()).toEqual(['pulumi-demo-team', 'pulumi-tenant-b']);
  });

  it("when a job's engine is made over its backend, then Pulumi gets the tenant's state backend and its key pinned, made before the first preview", async () => {
    // Arrange: an engine that records what it was made with (the Automation API's part is iac-pulumi-runner.test.ts).
    const vault = recordedVault();
    const made: ReturnType<typeof pulumiSettingsOf>[] = [];
    const make = (settings: ReturnType<typeof pulumiSettingsOf>): IacEngine => {
      made.push(settings);
      return { name: 'pulumi', version: () => Promise.resolve('3.248.0'), preview: () => Promise.reject(new Error('previewed')), apply: () => Promise.reject(new Error('applied')) };
    };
    const backend = backendOfTenant({ url: 'file:///state/{tenant}', secretsProvider: TEMPLATE.secretsProvider }, 'demo-team');

    // Act
    const engine = withTenantBackend(backend, make, {}, { credential: identity(), httpClient: vault.client });
    await expect(engine.preview({ tenant: 'demo-team', project: 'app', stack: 'dev' }, {}, {})).rejects.toThrow('previewed');

    // Assert
    expect(made.at(-1)).toEqual({
      envVars: { PULUMI_BACKEND_URL: 'file:///state/demo-team' },
      secretsProvider: `azurekeyvault://${VAULT}/keys/pulumi-demo-team/${vault.recordedVersions()[0]!.version}`,
    });
    expect([...vault.keys]).toEqual(['pulumi-demo-team']);
  });

  it('when the provider already names a version, or is not Key Vault, then it is used as given without a call', async () => {
    const vault = recordedVault();
    for (const provider of [`azurekeyvault://${VAULT}/keys/pulumi-demo-team/0123abcd`, 'passphrase', 'hashivault://pulumi-demo-team']) {
      expect(await ensureSecretsKey(provider, { credential: identity(), httpClient: vault.client })).toBe(provider);
    }
    expect(vault.calls).toEqual([]);
  });
});

describe("a key's first version", () => {
  // No published recording lists several versions of one key: the choice among them is the agent's own logic.
  const at = (seconds: number) => new Date(seconds * 1000);
  it('when a key has several versions, then the first still enabled is the one, the version id breaking a tie of the same second', () => {
    expect(firstEnabledVersion([{ version: 'c2', createdOn: at(30) }, { version: 'a1', createdOn: at(10) }, { version: 'b9', createdOn: at(20) }])).toBe('a1');
    expect(firstEnabledVersion([{ version: 'f', createdOn: at(10) }, { version: 'e', createdOn: at(10) }])).toBe('e');
    expect(firstEnabledVersion([{ version: 'a1', createdOn: at(10), enabled: false }, { version: 'b9', createdOn: at(20) }])).toBe('b9');
    expect(firstEnabledVersion([{ version: 'a1', enabled: false }])).toBeUndefined();
  });
});

describe('a secrets provider the agent cannot use', () => {
  it.each([
    ['a tenant id that cannot name a key', providerOf('demo_team'), '"pulumi-demo_team" is not a key name'],
    ['no key', `azurekeyvault://${VAULT}/secrets/pulumi`, 'it is not azurekeyvault://<vault>/keys/<key>[/<version>]'],
    ['a path too long', `azurekeyvault://${VAULT}/keys/a/b/c`, 'it is not azurekeyvault://<vault>/keys/<key>[/<version>]'],
  ])('when it has %s, then the job fails naming it', async (_case, provider, why) => {
    expect(() => secretsKeyOf(provider)).toThrow(why);
    expect(await refusal(ensureSecretsKey(provider, { credential: identity() }))).toMatchObject({ code: 'RUNNER.INVALID_SETTINGS', message: expect.stringContaining(why) });
  });
});
