import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import { Agent } from 'node:https';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as git from 'isomorphic-git';
import nodeHttp from 'isomorphic-git/http/node';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { realLocalPath } from '../../shared/platform/git/desired-state';
import { createLocalExternalServices } from '../../local/external-services/local-external-services.adapter';
import { createProvisioningService, type ProvisioningService } from '../../shared/provisioning/provisioning.service';
import { parseSourcePolicy } from '../../shared/provisioning/source-policy';
import { DIALECTS, skipDialect } from '../support/databases';
import { GitHttpServer, listenGit, type GitListener } from '../support/git-http-server';
import { TestRepository } from '../support/git-repositories';
import { aStackPromotion, outboxEvents, testServiceOptions, writeExampleReferences } from '../support/provisioning';
import { provisioningFixture } from '../support/provisioning-fixture';
import { selfSignedCertificate } from '../support/self-signed-certificate';

/**
 * Sources are allowed by the installation, never by the message (issue 16, rule 2), at intake: a promotion whose
 * repository no rule allows is a rejected run with its code and one ProvisioningFailed, and nothing was fetched or
 * read first. Remotes are real HTTPS Git servers on 127.0.0.1 (a certificate made at test time; the only thing
 * injected is trust in it), read with isomorphic-git's Node client.
 */
const PROJECT = 'name: remote-app\nruntime: yaml\nresources:\n  bucket:\n    type: local:storage:Bucket\n    properties:\n      name: remote-bucket\n';
const certificate = selfSignedCertificate();
const agent = new Agent({ ca: certificate.cert });
const trustingTestCa: git.HttpClient = { request: (request) => nodeHttp.request({ ...request, agent }) };
const CREDENTIAL = { ref: 'broker://git/demo-team-read', username: 'x-access-token', password: 'git-token-5d1f0c7a' };
const FETCH_MAX_BYTES = 256 * 1024;

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`promotion sources on ${dialect}`, () => {
    const fixture = provisioningFixture(dialect, { prefix: 'rch-sources-', stackCopies: 2 });
    const listeners: GitListener[] = [];
    let service: ProvisioningService;
    let remote: TestRepository;
    let small: string;
    let big: string;
    let allowed: GitListener;
    let plain: GitListener;
    let elsewhere: GitListener;
    let redirecting: GitListener;
    let guarded: GitListener;
    let cacheDir: string;
    let messages = 0;

    const listen = async (options: Parameters<typeof listenGit>[1]) => {
      const listener = await listenGit(new GitHttpServer(remote.dir), options);
      listeners.push(listener);
      return listener;
    };

    beforeAll(async () => {
      const { database, clock, cloud, root } = fixture;
      remote = await TestRepository.init(join(root, 'remote'));
      small = await remote.commit({ 'app/Pulumi.yaml': PROJECT, 'app/Pulumi.development.yaml': 'config: {}\n' });
      // About 1.5 MiB of packed random text: over the fetch limit below, far under the default one.
      big = await remote.commit({ 'app/big.txt': randomBytes(1024 * 1024).toString('hex') });
      allowed = await listen({ tls: certificate });
      plain = await listen({});
      elsewhere = await listen({ tls: certificate, host: 'localhost' });
      redirecting = await listen({ tls: certificate, redirectTo: elsewhere.origin });
      guarded = await listen({ tls: certificate, basicAuth: { username: CREDENTIAL.username, password: CREDENTIAL.password } });
      const stateDir = join(root, 'services');
      writeExampleReferences(stateDir);
      const references = JSON.parse(fs.readFileSync(join(stateDir, 'references.json'), 'utf8')) as { secrets: Record<string, string> };
      // A token, as GitHub, Azure DevOps and GitLab take it: the Basic password of the user x-access-token.
      references.secrets[CREDENTIAL.ref] = CREDENTIAL.password;
      fs.writeFileSync(join(stateDir, 'references.json'), JSON.stringify(references));
      cacheDir = join(root, 'git-cache');
      const base = testServiceOptions(database.store, clock, cloud, root);
      service = createProvisioningService({
        ...base,
        services: createLocalExternalServices({ store: database.store, clock, stateDir }),
        knowsTenant: (tenant) => Promise.resolve(tenant === 'demo-team' || tenant === 'other-team'),
        desiredState: { cacheDir, http: trustingTestCa, fetchMaxBytes: FETCH_MAX_BYTES, fetchTimeoutMs: 20_000 },
        sources: {
          policy: parseSourcePolicy({
            // Every tenant: the fixture's own folder (its example repository), as the local host allows its state dir's.
            '*': [{ prefix: `${pathToFileURL(realLocalPath(root)).href}/` }],
            // demo-team: the allowed server's /team/ (also over plain http, which the host never fetches), the
            // redirecting one, and the guarded one with its credential.
            'demo-team': [
              { prefix: `${allowed.origin}/team/` },
              { prefix: `${redirecting.origin}/team/` },
              { prefix: `${guarded.origin}/team/`, credentialRef: CREDENTIAL.ref },
            ],
          }),
          local: { localSources: true, realPath: realLocalPath },
        },
      });
    });
    afterAll(async () => {
      await Promise.all(listeners.map((l) => l.close()));
    });

    const promote = (repository: string, commit = small, environmentId = 'env-development') => {
      const base = aStackPromotion(fixture.example.repository, 'development', { stack: 'development', environmentId });
      return service.intake({ messageId: `msg-${dialect}-${++messages}`, body: { ...base, desiredState: { repository, commit, path: 'app', stack: 'development' } } });
    };
    const refusedWith = async (outcome: Awaited<ReturnType<typeof promote>>) => {
      if (outcome.outcome !== 'rejected' || !outcome.run) throw new Error(`not a rejected run: ${JSON.stringify(outcome)}`);
      const failed = (await outboxEvents(fixture.database.store, outcome.run.id)).filter((e) => e.type === 'ProvisioningFailed');
      expect(failed).toHaveLength(1);
      expect(failed[0]?.data).toMatchObject({ code: outcome.code, reason: outcome.reason });
      return { code: outcome.code, reason: outcome.reason, run: outcome.run };
    };
    /** Every text value of every table, for the search for a secret. */
    const storedText = async () => {
      const { store } = fixture.database;
      const tables =
        dialect === 'sqlite'
          ? (await sql<{ name: string }>`select name from sqlite_master where type = 'table'`.execute(store.db)).rows.map((r) => r.name)
          : (await sql<{ name: string }>`select table_name as name from information_schema.tables where table_schema = current_schema()`.execute(store.db)).rows.map((r) => r.name);
      const parts: string[] = [];
      for (const table of tables) parts.push(JSON.stringify((await sql`select * from ${sql.table(table)}`.execute(store.db)).rows));
      return parts.join('\n');
    };

    it('when a promotion names another repository on the same disk, as a file URL or a bare path, then the run is rejected SOURCE_NOT_ALLOWED before it is read', async () => {
      // Arrange: a real repository outside every allowed folder, and a commit it does not have: reading it would
      // answer DESIRED_STATE.COMMIT_NOT_FOUND, so the code tells whether it was read.
      const other = await TestRepository.init(fs.mkdtempSync(join(fixture.root, '..', 'rch-sources-other-')));
      await other.commit({ 'app/Pulumi.yaml': PROJECT });
      try {
        // Act
        const byUrl = await refusedWith(await promote(pathToFileURL(other.dir).href, 'f'.repeat(40)));
        const byPath = await refusedWith(await promote(other.dir, 'f'.repeat(40)));
        // Climbing out of the allowed folder with `..` reaches the same place.
        const climbing = await refusedWith(await promote(`${pathToFileURL(fixture.root).href}/../${other.dir.split('/').pop()}`, 'f'.repeat(40)));

        // Assert
        for (const refused of [byUrl, byPath, climbing]) expect(refused.code).toBe('PROVISIONING.SOURCE_NOT_ALLOWED');
        expect(byUrl.reason).toContain('not under a source prefix allowed for tenant demo-team');
      } finally {
        fs.rmSync(other.dir, { recursive: true, force: true });
      }
    });

    it('when a promotion names an http: URL under an allowed path, then the run is rejected SOURCE_NOT_ALLOWED and the server is never asked', async () => {
      // Act
      const refused = await refusedWith(await promote(`${plain.origin}/team/app.git`));

      // Assert
      expect(refused.code).toBe('PROVISIONING.SOURCE_NOT_ALLOWED');
      expect(refused.reason).toContain('http:');
      expect(plain.received).toEqual([]);
    });

    it('when a promotion names a URL with credentials in it, then the run is rejected SOURCE_CREDENTIALS_INLINE, nothing is fetched, and the credentials are stored nowhere', async () => {
      // Arrange
      const url = new URL(`${allowed.origin}/team/app.git`);
      url.username = 'deploy';
      url.password = 'inline-secret-93b1';
      const before = allowed.received.length;

      // Act
      const refused = await refusedWith(await promote(url.href));

      // Assert
      expect(refused.code).toBe('PROVISIONING.SOURCE_CREDENTIALS_INLINE');
      expect(allowed.received.length).toBe(before);
      expect(refused.run.desiredState.repository).not.toContain('inline-secret-93b1');
      expect(await storedText()).not.toContain('inline-secret-93b1');
    });

    it('when an allowed remote redirects to another host, then the run is rejected REDIRECT_REFUSED and the other host is never asked', async () => {
      // Act
      const refused = await refusedWith(await promote(`${redirecting.origin}/team/app.git`));

      // Assert
      expect(refused.code).toBe('DESIRED_STATE.REDIRECT_REFUSED');
      expect(redirecting.received.length).toBeGreaterThan(0);
      expect(elsewhere.received).toEqual([]);
    });

    it('when an allowed repository is larger than the fetch limit, then the run is rejected FETCH_TOO_LARGE and the cache keeps no part of it', async () => {
      // Act
      const refused = await refusedWith(await promote(`${allowed.origin}/team/big.git`, big));

      // Assert
      expect(refused.code).toBe('DESIRED_STATE.FETCH_TOO_LARGE');
      const left = fs.existsSync(cacheDir) ? fs.readdirSync(cacheDir, { recursive: true }).map(String) : [];
      expect(left.filter((file) => file.endsWith('.pack') || file.includes('.incoming-'))).toEqual([]);
    });

    it('when an allowed remote needs the rule\'s credential, then it is fetched with it (resolved at fetch time) and the credential is stored nowhere', async () => {
      // Act
      const outcome = await promote(`${guarded.origin}/team/app.git`);

      // Assert
      expect(outcome).toMatchObject({ outcome: 'accepted', run: { project: 'remote-app', desiredState: { repository: `${guarded.origin}/team/app.git` } } });
      expect(guarded.received.some((r) => r.authorization !== undefined)).toBe(true);
      expect(await storedText()).not.toContain(CREDENTIAL.password);
      const cached = fs.readdirSync(cacheDir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
      for (const file of cached) expect(fs.readFileSync(join(file.parentPath, file.name)).includes(CREDENTIAL.password)).toBe(false);
    });

    it('when a project sets what only the installation decides (a backend, a runtime it does not allow), then its plan fails PROJECT_NOT_ALLOWED naming each key, before any engine evaluates it', async () => {
      // Arrange: a repository under the allowed folder whose project would keep its state elsewhere and run node.
      const local = await TestRepository.init(join(fixture.root, `policy-${dialect}`));
      const commit = await local.commit({
        'app/Pulumi.yaml': 'name: elsewhere\nruntime: nodejs\nbackend:\n  url: s3://someone-elses-bucket\nresources: {}\n',
        'app/Pulumi.development.yaml': 'secretsprovider: awskms://alias/theirs\nconfig: {}\n',
      });
      const intake = await promote(pathToFileURL(local.dir).href, commit, 'env-policy');
      if (intake.outcome !== 'accepted') throw new Error(`not accepted: ${JSON.stringify(intake)}`);
      const appliesBefore = (await fixture.cloud.applies('local')).length;

      // Act
      const step = await service.plan(intake.run.id);

      // Assert
      expect(step).toEqual({ outcome: 'ended', state: 'failed' });
      const failed = (await service.getRun({ kind: 'all' }, intake.run.id)).run;
      expect(failed.error?.code).toBe('PROVISIONING.PROJECT_NOT_ALLOWED');
      for (const key of ['runtime', 'backend', 'secretsprovider']) expect(failed.error?.message).toContain(key);
      expect((await outboxEvents(fixture.database.store, intake.run.id)).filter((e) => e.type === 'ProvisioningFailed')).toHaveLength(1);
      expect((await fixture.cloud.applies('local')).length).toBe(appliesBefore);
    });

    it('when another tenant promotes from a prefix allowed to demo-team only, then its run is rejected SOURCE_NOT_ALLOWED and the server is never asked', async () => {
      // Arrange
      const base = aStackPromotion(fixture.example.repository, 'development', { stack: 'development' });
      const before = allowed.received.length;

      // Act
      const outcome = await service.intake({
        messageId: `msg-${dialect}-${++messages}`,
        body: { ...base, tenantId: 'other-team', desiredState: { repository: `${allowed.origin}/team/app.git`, commit: small, path: 'app', stack: 'development' } },
      });

      // Assert
      expect(outcome).toMatchObject({ outcome: 'rejected', code: 'PROVISIONING.SOURCE_NOT_ALLOWED' });
      expect(allowed.received.length).toBe(before);
    });
  });
}
