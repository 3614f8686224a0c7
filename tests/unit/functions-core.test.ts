import { app } from '@azure/functions';
import { describe, expect, it } from 'vitest';
import { functionsWithTrigger } from '../../local/functions-core/registry';

describe('local @azure/functions-core', () => {
  it('when a function registers through @azure/functions, then the local registry receives its bindings', () => {
    app.http('probeRegistration', { route: 'probe/{id}', methods: ['GET'], handler: () => ({ status: 204 }) });
    const found = functionsWithTrigger('httpTrigger').find((r) => r.metadata.name === 'probeRegistration');
    const trigger = Object.values(found?.metadata.bindings ?? {}).find((b) => b.type === 'httpTrigger');
    expect(trigger).toMatchObject({ route: 'probe/{id}', methods: ['GET'], direction: 'in' });
  });

  it('when a function registers after its trigger type was listed, then the next listing has it', () => {
    app.http('probeEarlier', { route: 'probe-earlier', methods: ['GET'], handler: () => ({ status: 204 }) });
    const before = functionsWithTrigger('httpTrigger');
    expect(functionsWithTrigger('httpTrigger')).toBe(before);
    app.http('probeLater', { route: 'probe-later', methods: ['GET'], handler: () => ({ status: 204 }) });
    const names = functionsWithTrigger('httpTrigger').map((r) => r.metadata.name);
    expect(names).toEqual(expect.arrayContaining(['probeEarlier', 'probeLater']));
    expect(before.map((r) => r.metadata.name)).not.toContain('probeLater');
  });
});
