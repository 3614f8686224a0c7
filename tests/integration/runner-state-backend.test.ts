import { BlobServiceClient, StorageSharedKeyCredential } from '@azure/storage-blob';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureStateContainer, stateContainerOf } from '../../runner/state-backend';
import { backendOfTenant } from '../../shared/platform/config/targets';
import { refusal } from '../support/refusal';

/** Azurite's well-known development account (public, documented by Microsoft). */
const ACCOUNT = 'devstoreaccount1';
const KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

/**
 * A runner agent makes each tenant's Pulumi state container before the tenant's first job (issue 17), against
 * Azurite's Blob service in a child process, with the real Azure Storage SDK: the container is there afterwards, one
 * per tenant, and a backend the setting cannot name a container for fails naming it.
 */
describe('the per-tenant Pulumi state container, against Azurite Blob', () => {
  let azurite: ChildProcess;
  let port = '';
  beforeAll(async () => {
    azurite = spawn(join(__dirname, '../../node_modules/.bin/azurite-blob'), ['--inMemoryPersistence', '--blobPort', '0', '--blobHost', '127.0.0.1', '--skipApiVersionCheck', '--loose'], { stdio: ['ignore', 'pipe', 'pipe'] });
    port = await new Promise<string>((resolve, reject) => {
      let output = '';
      azurite.stdout?.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        const match = /listens on http:\/\/127\.0\.0\.1:(\d+)/.exec(output);
        if (match?.[1]) resolve(match[1]);
      });
      azurite.once('exit', (code) => reject(new Error(`azurite-blob exited with ${code}: ${output}`)));
    });
  });
  afterAll(() => {
    azurite?.kill();
  });

  const backend = `azblob://state-{tenant}?storage_account=${ACCOUNT}&protocol=http&localemu=true&domain=127.0.0.1:`;
  // The backend a job of the tenant names: the target's, with the tenant in it (the host's `backendOfTenant`).
  const backendOf = (tenant: string) => backendOfTenant({ url: `${backend}${port}` }, tenant).url;
  const containers = async () => {
    const names: string[] = [];
    const client = new BlobServiceClient(`http://127.0.0.1:${port}/${ACCOUNT}`, new StorageSharedKeyCredential(ACCOUNT, KEY));
    for await (const container of client.listContainers()) names.push(container.name);
    return names.sort();
  };

  it("when two tenants' first jobs come, twice each, then each tenant has its own container, made once", async () => {
    // Act
    for (const tenant of ['demo-team', 'tenant-b', 'demo-team', 'tenant-b']) await ensureStateContainer(backendOf(tenant), { AZURE_STORAGE_KEY: KEY });

    // Assert
    expect(await containers()).toEqual(['state-demo-team', 'state-tenant-b']);
  });

  it('when the deployment made the container already, then the agent only looks at it and asks to make nothing (its identity could not)', async () => {
    // Arrange: the container as infra makes it, before any job of the tenant.
    const service = new BlobServiceClient(`http://127.0.0.1:${port}/${ACCOUNT}`, new StorageSharedKeyCredential(ACCOUNT, KEY));
    await service.getContainerClient('state-made-by-infra').create();
    // The agent reaches Azurite through a proxy that notes each request's method.
    const sent: string[] = [];
    const proxy: Server = createServer((incoming, outgoing) => {
      sent.push(incoming.method ?? '');
      const forward = request({ host: '127.0.0.1', port, path: incoming.url, method: incoming.method, headers: incoming.headers }, (answer) => {
        outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(outgoing);
      });
      incoming.pipe(forward);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const viaProxy = backendOfTenant({ url: `${backend}${(proxy.address() as AddressInfo).port}` }, 'made-by-infra').url;

    // Act
    try {
      await ensureStateContainer(viaProxy, { AZURE_STORAGE_KEY: KEY });
    } finally {
      proxy.close();
    }

    // Assert: one read of the container's properties, no PUT.
    expect(sent).toEqual(['GET']);
  });

  it('when a tenant id cannot name a container, or the setting names no account, then the job fails naming the setting and why', async () => {
    expect(await refusal(ensureStateContainer(backendOf('Demo_Team'), { AZURE_STORAGE_KEY: KEY }))).toMatchObject({
      code: 'RUNNER.INVALID_SETTINGS',
      message: expect.stringMatching(/^the state backend azblob:\/\/state-Demo_Team: "state-Demo_Team" is not a blob container name/),
    });
    expect(await refusal(ensureStateContainer('azblob://state-x', {}))).toMatchObject({ code: 'RUNNER.INVALID_SETTINGS', message: expect.stringContaining('names no storage_account') });
    expect(await containers()).not.toContain('state-Demo_Team');
  });

  it('when the storage does not answer, then the job fails as the runner being unavailable', async () => {
    const error = await refusal(ensureStateContainer(`azblob://state-x?storage_account=${ACCOUNT}&protocol=http&localemu=true&domain=127.0.0.1:1`, { AZURE_STORAGE_KEY: KEY }, { maxTries: 1 }));
    expect(error).toMatchObject({ code: 'PROVISIONING.RUNNER_UNAVAILABLE', message: expect.stringContaining('state-x') });
  });

  it('when the backend is not Azure Blob (a file backend, a Pulumi Cloud URL), then there is no container to make', () => {
    expect(stateContainerOf('file:///var/pulumi-state')).toBeUndefined();
    expect(stateContainerOf('https://api.pulumi.com')).toBeUndefined();
    expect(stateContainerOf(`azblob://state-a?storage_account=${ACCOUNT}`)).toEqual({ serviceUrl: `https://${ACCOUNT}.blob.core.windows.net`, account: ACCOUNT, container: 'state-a' });
  });
});
