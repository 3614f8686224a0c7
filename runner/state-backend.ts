import type { TokenCredential } from '@azure/core-auth';
import type { HttpClient } from '@azure/core-rest-pipeline';
import { AppError } from '../shared/platform/errors/app-error';
import type { IacEngine } from '../shared/platform/iac/iac-runner';
import type { JobBackend } from '../shared/platform/iac/runner-job';

/**
 * The Pulumi state backend of a tenant's jobs, as the job names it (the target's `backend.url` with the tenant in
 * it): an `azblob://` URL names its blob container, one per tenant. Pulumi's azblob backend does not create its
 * container. In Azure the deployment makes each tenant's container and the agent's identity holds a role on its own
 * tenants' containers only, which cannot make one: the agent looks first and makes the container only where it is
 * missing (a customer-hosted agent whose identity may make it, the local emulator).
 *
 * The URL is gocloud.dev's, as the `pulumi` CLI reads it: `azblob://<container>?storage_account=<account>`, with
 * optional `domain` (default `blob.core.windows.net`), `protocol` (default `https`) and `localemu=true` (an emulator's
 * path-style URL, `<protocol>://<domain>/<account>`). With `AZURE_STORAGE_KEY` set, the account key signs the calls
 * (as the CLI would use it); else the agent's Entra identity does.
 */
export interface StateContainer {
  readonly serviceUrl: string;
  readonly account: string;
  readonly container: string;
}

export function stateContainerOf(backendUrl: string): StateContainer | undefined {
  let url: URL;
  try {
    url = new URL(backendUrl);
  } catch {
    throw invalidSettings('state backend', backendUrl, 'it is not a URL');
  }
  if (url.protocol !== 'azblob:') return undefined;
  const container = decodeURIComponent(url.host);
  const account = url.searchParams.get('storage_account') ?? '';
  if (!/^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$/.test(container)) throw invalidSettings('state backend', backendUrl, `"${container}" is not a blob container name (3 to 63 lowercase letters, digits and single hyphens)`);
  if (!/^[a-z0-9]{3,24}$/.test(account)) throw invalidSettings('state backend', backendUrl, 'it names no storage_account');
  const protocol = url.searchParams.get('protocol') ?? 'https';
  const domain = url.searchParams.get('domain') ?? 'blob.core.windows.net';
  const serviceUrl = url.searchParams.get('localemu') === 'true' ? `${protocol}://${domain}/${account}` : `${protocol}://${account}.${domain}`;
  return { serviceUrl, account, container };
}

/**
 * Creates the backend's container if it is missing (a container that exists is only looked at); nothing for a
 * backend that is not `azblob://`. `maxTries`: the storage SDK's attempts at a call (default its own, 4).
 */
export async function ensureStateContainer(backendUrl: string, env: NodeJS.ProcessEnv = process.env, options: { readonly maxTries?: number } = {}): Promise<void> {
  const target = stateContainerOf(backendUrl);
  if (!target) return;
  /* eslint-disable @typescript-eslint/no-require-imports */
  const blob = require('@azure/storage-blob') as typeof import('@azure/storage-blob');
  const credential: TokenCredential | InstanceType<typeof blob.StorageSharedKeyCredential> = env.AZURE_STORAGE_KEY
    ? new blob.StorageSharedKeyCredential(target.account, env.AZURE_STORAGE_KEY)
    : new (require('@azure/identity') as typeof import('@azure/identity')).DefaultAzureCredential();
  /* eslint-enable @typescript-eslint/no-require-imports */
  try {
    const retryOptions = options.maxTries === undefined ? {} : { retryOptions: { maxTries: options.maxTries } };
    const container = new blob.BlobServiceClient(target.serviceUrl, credential, retryOptions).getContainerClient(target.container);
    if (!(await container.exists())) await container.createIfNotExists();
  } catch (thrown) {
    throw new AppError('PROVISIONING.RUNNER_UNAVAILABLE', 'unavailable', `the state container ${target.container} of ${target.serviceUrl} could not be made: ${thrown instanceof Error ? thrown.message : String(thrown)}`);
  }
}

/**
 * The tenant's secrets key on the job's target: an `azurekeyvault://<vault host>/keys/<name>` secrets provider (one
 * key per tenant, `pulumi-{tenant}`). In Azure the deployment makes it and the pool's identity may read and use its
 * own tenants' keys only (Key Vault Crypto User at the key's scope); where it is missing, an agent allowed to make it
 * (a customer-hosted one) makes it the first time the tenant needs it. Returns the provider pinned to the key's
 * first enabled version: Pulumi's Key Vault keeper decrypts with the version its URL names, the latest when it names
 * none, so a second version (a rotation, or two agents making the key at once) would otherwise leave every stack
 * encrypted before it unreadable. Any other provider is returned as given.
 */
export async function ensureSecretsKey(secretsProvider: string, options: { readonly credential?: TokenCredential; readonly httpClient?: HttpClient } = {}): Promise<string> {
  const key = secretsKeyOf(secretsProvider);
  if (!key || key.version) return secretsProvider;
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { KeyClient } = require('@azure/keyvault-keys') as typeof import('@azure/keyvault-keys');
  const credential = options.credential ?? new (require('@azure/identity') as typeof import('@azure/identity')).DefaultAzureCredential();
  /* eslint-enable @typescript-eslint/no-require-imports */
  const client = new KeyClient(`https://${key.vault}`, credential, options.httpClient ? { httpClient: options.httpClient } : {});
  const firstVersion = async () => {
    const versions: KeyVersion[] = [];
    for await (const properties of client.listPropertiesOfKeyVersions(key.name)) versions.push(properties);
    return firstEnabledVersion(versions);
  };
  try {
    let version = await firstVersion();
    if (!version) {
      await client.createRsaKey(key.name, { keySize: 3072, keyOps: ['encrypt', 'decrypt'] });
      version = await firstVersion();
    }
    if (!version) throw new Error(`key ${key.name} has no enabled version`);
    return `azurekeyvault://${key.vault}/keys/${key.name}/${version}${key.query}`;
  } catch (thrown) {
    throw new AppError('PROVISIONING.RUNNER_UNAVAILABLE', 'unavailable', `the secrets key ${key.name} of ${key.vault} could not be made: ${thrown instanceof Error ? thrown.message : String(thrown)}`);
  }
}

/** What Key Vault lists of a key's version (the SDK's `KeyProperties`). */
export interface KeyVersion {
  readonly version?: string;
  readonly enabled?: boolean;
  readonly createdOn?: Date;
}

/** The key's first version still enabled: the oldest, the version id breaking a tie (created in the same second). */
export function firstEnabledVersion(versions: readonly KeyVersion[]): string | undefined {
  return versions
    .filter((v): v is KeyVersion & { version: string } => v.enabled !== false && v.version !== undefined)
    .map((v) => ({ version: v.version, createdOn: v.createdOn?.getTime() ?? 0 }))
    .sort((a, b) => a.createdOn - b.createdOn || a.version.localeCompare(b.version))[0]?.version;
}

/** An `azurekeyvault://` secrets provider's vault host, key name and version (undefined for other providers). */
export function secretsKeyOf(secretsProvider: string): { vault: string; name: string; version?: string; query: string } | undefined {
  if (!secretsProvider.startsWith('azurekeyvault://')) return undefined;
  const url = new URL(secretsProvider);
  const [keys, name, version, ...rest] = url.pathname.split('/').slice(1);
  if (keys !== 'keys' || !name || rest.length > 0) throw invalidSettings('secrets provider', secretsProvider, 'it is not azurekeyvault://<vault>/keys/<key>[/<version>]');
  if (!/^[0-9a-zA-Z-]{1,127}$/.test(name)) throw invalidSettings('secrets provider', secretsProvider, `"${name}" is not a key name (1 to 127 letters, digits and hyphens)`);
  return { vault: url.host, name, ...(version ? { version } : {}), query: url.search };
}

/** What the Automation API is given for a job's backend: the state backend URL and the secrets provider. */
export function pulumiSettingsOf(backend: JobBackend): { envVars: Record<string, string>; secretsProvider?: string } {
  return { envVars: { PULUMI_BACKEND_URL: backend.url }, ...(backend.secretsProvider ? { secretsProvider: backend.secretsProvider } : {}) };
}

/**
 * The engine of one job over its tenant's backend: before its first preview or apply, the state container and the
 * secrets key are made if missing, and the engine is made with the key pinned (once per job; a failure is retried by
 * the next call).
 */
export function withTenantBackend(
  backend: JobBackend,
  make: (settings: ReturnType<typeof pulumiSettingsOf>) => IacEngine,
  env: NodeJS.ProcessEnv = process.env,
  keyOptions: Parameters<typeof ensureSecretsKey>[1] = {},
): IacEngine {
  const unpinned = make(pulumiSettingsOf(backend));
  let ready: Promise<IacEngine> | undefined;
  const engine = () =>
    (ready ??= (async () => {
      await ensureStateContainer(backend.url, env);
      const secretsProvider = backend.secretsProvider ? await ensureSecretsKey(backend.secretsProvider, keyOptions) : undefined;
      return make(pulumiSettingsOf({ url: backend.url, ...(secretsProvider ? { secretsProvider } : {}) }));
    })().catch((error: unknown) => {
      ready = undefined;
      throw error;
    }));
  return {
    name: unpinned.name,
    version: () => unpinned.version(),
    preview: async (...args) => (await engine()).preview(...args),
    apply: async (...args) => (await engine()).apply(...args),
  };
}

function invalidSettings(what: string, url: string, why: string): AppError {
  return new AppError('RUNNER.INVALID_SETTINGS', 'validation', `the ${what} ${url.replace(/\?.*/, '')}: ${why}`);
}
