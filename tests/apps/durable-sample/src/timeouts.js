// The end-to-end app's TimeoutOrchestrator: an activity races a durable timer (Task.any); the loser is ignored.
const df = require('durable-functions');

df.app.orchestration('TimeoutOrchestrator', function* (context) {
  const { activityMs, timeoutMs } = context.df.getInput();
  const activityTask = context.df.callActivity('long_activity', activityMs);
  const timeoutTask = context.df.createTimer(new Date(context.df.currentUtcDateTime.getTime() + timeoutMs));
  const winner = yield context.df.Task.any([activityTask, timeoutTask]);
  if (winner === activityTask) {
    timeoutTask.cancel();
    return activityTask.result;
  }
  return 'The activity function timed out';
});

df.app.activity('long_activity', {
  handler: async (ms) => {
    await new Promise((resolve) => setTimeout(resolve, ms));
    return 'The activity function completed successfully';
  },
});
