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
});
