import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { loadDesiredState } from '../../shared/platform/git/load-desired-state';
import { parsePromotion, type PromotionApproved } from '../../shared/provisioning/promotion';
import { runCli } from '../support/child-process';

describe('runtime-cloud example promotion (a real process on a temporary state dir)', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'rch-example-cli-'));
  afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

  /** Runs the command, checks that it printed one valid PromotionApproved and nothing else, and returns it. */
  async function promotion(environment: string): Promise<PromotionApproved> {
    const result = await runCli(['example', 'promotion', environment, '--state-dir', stateDir]);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const parsed = parsePromotion(result.stdout);
    if (parsed.outcome === 'invalid') throw new Error(`printed an invalid promotion: ${JSON.stringify(parsed.problems)}`);
    return parsed.promotion;
  }

  it('when a development promotion is asked for, then a valid PromotionApproved of the example repository at its commit is printed', async () => {
    // Arrange
    const before = Date.now();

    // Act
    const printed = await promotion('development');

    // Assert
    expect(printed.environment).toEqual({ id: 'env-demo-development', name: 'development', tier: 'development' });
    expect(printed.tenantId).toBe('demo-team');
    expect(printed.promotionId).toMatch(/^prom_[0-9a-f-]{36}$/);
    expect(printed.desiredState).toMatchObject({ repository: pathToFileURL(join(stateDir, 'desired-state.git')).href, path: 'app', stack: 'development' });
    expect(Date.parse(printed.approvedAt)).toBeGreaterThanOrEqual(before - 1000);
    // The message points at desired state that can really be read: the project with the development stack.
    const state = await loadDesiredState(printed.desiredState, { tenant: printed.tenantId });
    expect(state.stacks).toHaveProperty('development');
  });

  it('when promotions are asked for twice, then each has a fresh promotionId and both name the same commit', async () => {
    // Act
    const first = await promotion('production');
    const second = await promotion('production');

    // Assert
    expect(second.promotionId).not.toBe(first.promotionId);
    expect(second.desiredState.commit).toBe(first.desiredState.commit);
    expect(first.environment.tier).toBe('production');
    expect(first.desiredState.stack).toBe('production');
  });

  it.each(['promotion qa', 'promotion', 'release development', 'promotion development production'])('when the example asked for is "%s", then usage is printed and the exit code is 2', async (words) => {
    // Act
    const result = await runCli(['example', ...words.split(' '), '--state-dir', stateDir]);

    // Assert
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain('runtime-cloud example promotion <development|production>');
  });
});
