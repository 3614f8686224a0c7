// Sub-orchestrations: children with ids given or derived, in parallel, failing (caught by the parent), retried, and
// a child that waits for an event (for suspend, terminate and restart cases).
const df = require('durable-functions');

df.app.orchestration('SayHelloInline', function* (context) {
  const name = context.df.getInput();
  if (name === 'fail') throw new Error('Result: Failure');
  const greeting = yield context.df.callActivity('sayHello', name);
  return { greeting, instanceId: context.df.instanceId, parentInstanceId: context.df.parentInstanceId ?? null };
});

/** Children in parallel: `{ names, ids? }` (ids[i] for names[i], or derived when absent). */
df.app.orchestration('SubOrchestratorParent', function* (context) {
  const { names, ids = [] } = context.df.getInput();
  return yield context.df.Task.all(names.map((name, i) => context.df.callSubOrchestrator('SayHelloInline', name, ids[i])));
});

df.app.orchestration('SubOrchestratorCatch', function* (context) {
  try {
    yield context.df.callSubOrchestrator('SayHelloInline', 'fail');
    return 'not caught';
  } catch (error) {
    return { caught: error.message, type: error.name };
  }
});

/** A child whose activity fails its first `failures` calls (per key): each failed attempt fails the child. */
df.app.orchestration('FlakyChild', function* (context) {
  return yield context.df.callActivity('flaky_activity', context.df.getInput());
});

/** `{ failures, attempts, first, backoff?, childId? }`: the flaky child with retry options. */
df.app.orchestration('SubOrchestratorRetry', function* (context) {
  const { failures, attempts, first, backoff, childId } = context.df.getInput();
  const options = new df.RetryOptions(first, attempts);
  if (backoff !== undefined) options.backoffCoefficient = backoff;
  try {
    return yield context.df.callSubOrchestratorWithRetry('FlakyChild', options, { key: context.df.instanceId, failures }, childId);
  } catch (error) {
    // A TaskFailedError (the child failed on an activity's failure details) carries them; a plain Error does not.
    return { caught: error.message, type: error.name, properties: error.failureDetails?.properties ?? null };
  }
});

df.app.orchestration('WaitingChild', function* (context) {
  context.df.setCustomStatus('waiting');
  const value = yield context.df.waitForExternalEvent('go');
  return `child got ${value}`;
});

/** A parent of one WaitingChild with the given id. */
df.app.orchestration('ParentOfWaitingChild', function* (context) {
  const { childId } = context.df.getInput();
  context.df.setCustomStatus('awaiting child');
  const result = yield context.df.callSubOrchestrator('WaitingChild', null, childId);
  return `parent saw: ${result}`;
});

/** Children the host cannot start: an orchestration it does not have, and the parent's own id. Both are caught. */
df.app.orchestration('SubOrchestratorRefusals', function* (context) {
  const caught = [];
  for (const [name, instanceId] of [
    ['NoSuchOrchestrator', undefined],
    ['SayHelloInline', context.df.instanceId],
  ]) {
    try {
      yield context.df.callSubOrchestrator(name, 'x', instanceId);
    } catch (error) {
      caught.push(error.message);
    }
  }
  return caught;
});
