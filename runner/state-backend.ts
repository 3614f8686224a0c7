import type { TokenCredential } from '@azure/core-auth';
import { AppError } from '../shared/platform/errors/app-error';
import type { IacEngine } from '../shared/platform/iac/iac-runner';

/**
 * The Pulumi state backend of a tenant's jobs: an `azblob://` URL names its blob container, one per tenant
 * (`RuntimeCloud__Runner__StateBackend` with `{tenant}`). Pulumi's azblob backend does not create its container, so
 * the agent creates it before the tenant's first job, with its own identity (it holds Storage Blob Data Contributor
 * on its target's state account and nothing else there).
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
    throw invalidBackend(backendUrl, 'it is not a URL');
  }
  if (url.protocol !== 'azblob:') return undefined;
  const container = decodeURIComponent(url.host);
  const account = url.searchParams.get('storage_account') ?? '';
  if (!/^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$/.test(container)) throw invalidBackend(backendUrl, `"${container}" is not a blob container name (3 to 63 lowercase letters, digits and single hyphens)`);
  if (!/^[a-z0-9]{3,24}$/.test(account)) throw invalidBackend(backendUrl, 'it names no storage_account');
  const protocol = url.searchParams.get('protocol') ?? 'https';
  const domain = url.searchParams.get('domain') ?? 'blob.core.windows.net';
  const serviceUrl = url.searchParams.get('localemu') === 'true' ? `${protocol}://${domain}/${account}` : `${protocol}://${account}.${domain}`;
  return { serviceUrl, account, container };
}

/**
 * Creates the backend's container if it is missing; nothing for a backend that is not `azblob://`. `maxTries`: the
 * storage SDK's attempts at the call (default its own, 4).
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
    await new blob.BlobServiceClient(target.serviceUrl, credential, retryOptions).getContainerClient(target.container).createIfNotExists();
  } catch (thrown) {
    throw new AppError('PROVISIONING.RUNNER_UNAVAILABLE', 'unavailable', `the state container ${target.container} of ${target.serviceUrl} could not be made: ${thrown instanceof Error ? thrown.message : String(thrown)}`);
  }
}

/** The engine of one job, which first makes sure its tenant's state container exists (once, for preview and apply). */
export function withStateContainer(engine: IacEngine, backendUrl: string, env: NodeJS.ProcessEnv = process.env): IacEngine {
  let ready: Promise<void> | undefined;
  const ensure = () => {
    ready ??= ensureStateContainer(backendUrl, env).catch((error: unknown) => {
      ready = undefined;
      throw error;
    });
    return ready;
  };
  return {
    name: engine.name,
    version: () => engine.version(),
    preview: async (...args) => {
      await ensure();
      return engine.preview(...args);
    },
    apply: async (...args) => {
      await ensure();
      return engine.apply(...args);
    },
  };
}

function invalidBackend(backendUrl: string, why: string): AppError {
  return new AppError('RUNNER.INVALID_SETTINGS', 'validation', `RuntimeCloud__Runner__StateBackend ${backendUrl.replace(/\?.*/, '')}: ${why}`);
}
