// The durable client from an HTTP function, as an app calls it: every operation the conformance tests drive through
// the SDK's client (the HTTP management API itself is called directly by the tests, by the URLs it hands out).
const { app } = require('@azure/functions');
const df = require('durable-functions');

async function body(request) {
  const text = await request.text();
  return text ? JSON.parse(text) : {};
}

const operations = {
  start: async (client, instanceId, request) => {
    const { name, input, version } = await body(request);
    const id = await client.startNew(name, { ...(instanceId ? { instanceId } : {}), ...(input !== undefined ? { input } : {}), ...(version ? { version } : {}) });
    // The management URLs, as createCheckStatusResponse hands them to HTTP callers (on the request's origin), and
    // as createHttpManagementPayload names them (on the host's address: the SDK reads WEBSITE_HOSTNAME for it).
    return { id, links: await client.createCheckStatusResponse(request, id).json(), payload: client.createHttpManagementPayload(id) };
  },
  raise: async (client, instanceId, request) => {
    const { eventName, data } = await body(request);
    await client.raiseEvent(instanceId, eventName, data);
    return {};
  },
  status: async (client, instanceId) => ({ status: await client.getStatus(instanceId, { showHistory: true, showHistoryOutput: true }) }),
  terminate: async (client, instanceId, request) => {
    await client.terminate(instanceId, (await body(request)).reason ?? 'terminated by test');
    return {};
  },
  suspend: async (client, instanceId) => {
    await client.suspend(instanceId, 'Suspending the instance for test.');
    return {};
  },
  resume: async (client, instanceId) => {
    await client.resume(instanceId, 'Resuming the instance for test.');
    return {};
  },
  purge: async (client, instanceId) => ({ result: await client.purgeInstanceHistory(instanceId) }),
  'purge-by': async (client, _instanceId, request) => {
    const { from, to, statuses } = await body(request);
    return {
      result: await client.purgeInstanceHistoryBy({
        createdTimeFrom: new Date(from),
        ...(to ? { createdTimeTo: new Date(to) } : {}),
        ...(statuses ? { runtimeStatus: statuses } : {}),
      }),
    };
  },
};

app.http('durableClient', {
  route: 'client/{operation}/{instanceId?}',
  methods: ['POST'],
  extraInputs: [df.input.durableClient()],
  handler: async (request, context) => {
    const operation = operations[request.params.operation];
    if (!operation) return { status: 404, jsonBody: { ok: false, error: `no operation ${request.params.operation}` } };
    try {
      return { jsonBody: { ok: true, ...(await operation(df.getClient(context), request.params.instanceId ?? '', request)) } };
    } catch (error) {
      return { jsonBody: { ok: false, error: error instanceof Error ? error.message : String(error) } };
    }
  },
});
