import { describe, expect, it } from 'vitest';
import { parsePoolResize } from '../../shared/provisioning/pool-resize';
import { aPoolResizeEvent } from '../support/provisioning';

describe('PoolResizeRequested as provisioning reads it', () => {
  const event = aPoolResizeEvent({ id: 'evt-1', pool: 'build-pool', iacStack: 'team-a/worker-pool/pools-dev', fromCapacity: 4, toCapacity: 8 });

  it('when the event arrives parsed, as JSON text or as bytes, then it reads the same resize', () => {
    const expected = { outcome: 'valid', resize: { eventId: 'evt-1', pool: 'build-pool', iacStack: { tenant: 'team-a', project: 'worker-pool', stack: 'pools-dev' }, fromCapacity: 4, toCapacity: 8 } };
    expect(parsePoolResize(event)).toEqual(expected);
    expect(parsePoolResize(JSON.stringify(event))).toEqual(expected);
    expect(parsePoolResize(new TextEncoder().encode(JSON.stringify(event)))).toEqual(expected);
  });

  it('when another event of the topic arrives, then it is not for provisioning', () => {
    expect(parsePoolResize({ ...event, type: 'LeaseExpired' })).toEqual({ outcome: 'other', type: 'LeaseExpired' });
  });

  it('when the data lacks a size or names a stack that cannot be one, then it is invalid, naming the fields and the pool', () => {
    const parsed = parsePoolResize({ ...event, data: { pool: 'build-pool', iacStack: 'no stack/name', toCapacity: 2 } });
    expect(parsed).toMatchObject({ outcome: 'invalid', pool: 'build-pool' });
    expect(parsed.outcome === 'invalid' && parsed.problems.map((p) => p.field)).toEqual(['iacStack', 'fromCapacity']);
    expect(parsePoolResize('{ not json')).toMatchObject({ outcome: 'invalid', problems: [{ field: '(message)' }] });
  });

  it('when the stack is not named tenant/project/stack, then it is invalid: a bare stack name is no stack of any tenant', () => {
    for (const iacStack of ['pools-dev', 'worker-pool/pools-dev', '/worker-pool/pools-dev', 'team-a/worker pool/pools-dev', 'team-a/worker-pool/']) {
      const parsed = parsePoolResize({ ...event, data: { ...(event.data as object), iacStack } });
      expect(parsed.outcome === 'invalid' && parsed.problems.map((p) => p.field), iacStack).toEqual(['iacStack']);
    }
    // Whatever comes before the project and the stack is the tenant.
    expect(parsePoolResize({ ...event, data: { ...(event.data as object), iacStack: 'org/team-a/worker-pool/pools-dev' } })).toMatchObject({
      outcome: 'valid',
      resize: { iacStack: { tenant: 'org/team-a', project: 'worker-pool', stack: 'pools-dev' } },
    });
  });
});
