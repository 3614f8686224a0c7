import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as git from 'isomorphic-git';
import { afterAll, describe, expect, it } from 'vitest';
import { EXAMPLES_DIR, ensureExampleRepository, examplePromotion } from '../../local/example-repository';
import { loadDesiredState } from '../../shared/platform/git/load-desired-state';
import { ManualClock } from '../../shared/platform/time/clock';
import { parsePromotion } from '../../shared/provisioning/promotion';

describe('the local example repository', () => {
  const root = fs.mkdtempSync(join(tmpdir(), 'rch-example-repo-'));
  afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

  it('when it is made in a fresh state dir, then it holds the example project with a development and a production stack', async () => {
    // Arrange
    const stateDir = join(root, 'fresh', 'state');

    // Act
    const repository = await ensureExampleRepository(stateDir);
    const state = await loadDesiredState({ repository: repository.url, commit: repository.commit, path: 'app' }, { tenant: 'demo-team' });

    // Assert
    expect(repository.path).toBe(join(stateDir, 'desired-state.git'));
    expect(repository.commit).toMatch(/^[0-9a-f]{40}$/);
    expect(state.project).toBe(fs.readFileSync(join(EXAMPLES_DIR, 'app/Pulumi.yaml'), 'utf8'));
    expect(Object.keys(state.stacks).sort()).toEqual(['development', 'production']);
    expect(state.stacks.production).toContain('secretRef: broker://runtime-cloud/app-db-password');
    expect(state.stacks.production).toContain('configRef: platform://app/feature-flags');
  });

  it('when it is asked for again and the examples did not change, then it answers the same commit and adds none', async () => {
    // Arrange
    const stateDir = join(root, 'again');
    const first = await ensureExampleRepository(stateDir, { clock: new ManualClock('2026-01-01T00:00:00Z') });

    // Act: a later time would make a different commit id, if a commit were made.
    const second = await ensureExampleRepository(stateDir, { clock: new ManualClock('2026-06-01T00:00:00Z') });

    // Assert
    expect(second).toEqual(first);
    expect(await git.log({ fs, gitdir: first.path, ref: 'main' })).toHaveLength(1);
  });

  it('when the examples changed, then a new commit on top of the old one holds the change and the old commit stays readable', async () => {
    // Arrange
    const source = join(root, 'changed-source');
    fs.cpSync(EXAMPLES_DIR, source, { recursive: true });
    const stateDir = join(root, 'changed');
    const before = await ensureExampleRepository(stateDir, { source });
    fs.writeFileSync(join(source, 'app/Pulumi.development.yaml'), 'config:\n  demo-app:replicas: 2\n');
    fs.writeFileSync(join(source, 'app/Pulumi.staging.yaml'), 'config:\n  demo-app:replicas: 1\n');

    // Act
    const after = await ensureExampleRepository(stateDir, { source });

    // Assert
    expect(after.commit).not.toBe(before.commit);
    expect((await git.readCommit({ fs, gitdir: after.path, oid: after.commit })).commit.parent).toEqual([before.commit]);
    const now = await loadDesiredState({ repository: after.path, commit: after.commit, path: 'app' }, { tenant: 'demo-team' });
    const then = await loadDesiredState({ repository: after.path, commit: before.commit, path: 'app' }, { tenant: 'demo-team' });
    expect(now.stacks.development).toBe('config:\n  demo-app:replicas: 2\n');
    expect(Object.keys(now.stacks).sort()).toEqual(['development', 'production', 'staging']);
    expect(Object.keys(then.stacks).sort()).toEqual(['development', 'production']);
  });

  it('when a promotion of the example is made, then it is a valid PromotionApproved naming the repository, its commit and the stack', async () => {
    // Arrange
    const repository = await ensureExampleRepository(join(root, 'promotion'));
    const ids = { next: (prefix?: string) => `${prefix}_1` };

    // Act
    const promotion = examplePromotion('production', repository, { clock: new ManualClock('2026-03-01T09:30:00Z'), ids });

    // Assert
    expect(parsePromotion(promotion)).toEqual({ outcome: 'valid', promotion });
    expect(promotion).toEqual({
      promotionId: 'prom_1',
      tenantId: 'demo-team',
      environment: { id: 'env-demo-production', name: 'production', tier: 'production' },
      release: { name: 'demo-app', version: `1.0.0+${repository.commit.slice(0, 7)}` },
      desiredState: { repository: repository.url, commit: repository.commit, path: 'app', stack: 'production' },
      requestedBy: 'local-developer',
      approvedAt: '2026-03-01T09:30:00.000Z',
    });
  });
});
