// The end-to-end app's ActivityErrorHandling: an activity's error rethrown, caught, and retried.
const df = require('durable-functions');

/** Calls per key in this process: the flaky activity fails until it has been called `failures` times. */
const attempts = new Map();

df.app.activity('raise_exception', {
  handler: () => {
    throw new Error('This activity failed');
  },
});

df.app.activity('flaky_activity', {
  handler: ({ key, failures }) => {
    const attempt = (attempts.get(key) ?? 0) + 1;
    attempts.set(key, attempt);
    if (attempt <= failures) throw new Error(`attempt ${attempt} failed`);
    return `succeeded on attempt ${attempt}`;
  },
});

df.app.orchestration('RethrowActivityException', function* (context) {
  yield context.df.callActivity('raise_exception', context.df.instanceId);
});

df.app.orchestration('CatchActivityException', function* (context) {
  try {
    yield context.df.callActivity('raise_exception', context.df.instanceId);
    return 'not caught';
  } catch (error) {
    return `Caught exception: ${error.message}`;
  }
});

df.app.orchestration('RetryActivityFunction', function* (context) {
  const { failures, attempts: maxAttempts } = context.df.getInput();
  return yield context.df.callActivityWithRetry('flaky_activity', new df.RetryOptions(50, maxAttempts), { key: context.df.instanceId, failures });
});

df.app.orchestration('ThrowingOrchestrator', function* (context) {
  yield context.df.callActivity('sayHello', 'Cairo');
  throw new Error('The orchestrator gave up');
});
