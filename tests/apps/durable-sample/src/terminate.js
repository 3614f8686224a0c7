// The end-to-end app's LongRunningOrchestrator: activities one after another until it is terminated.
const df = require('durable-functions');

df.app.orchestration('LongRunningOrchestrator', function* (context) {
  for (let i = 0; i < 100000; i++) {
    context.df.setCustomStatus({ completed: i });
    yield context.df.callActivity('simulated_work_activity', 5);
  }
  return 'finished';
});

df.app.activity('simulated_work_activity', {
  handler: async (ms) => {
    await new Promise((resolve) => setTimeout(resolve, ms));
    return `Slept for ${ms}ms.`;
  },
});
