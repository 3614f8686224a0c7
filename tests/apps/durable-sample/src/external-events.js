// External events, as the end-to-end app's ExternalEventOrchestrator, with a timeout: the event or the timer wins.
const df = require('durable-functions');

df.app.orchestration('ExternalEventOrchestrator', function* (context) {
  const { timeoutMs } = context.df.getInput();
  context.df.setCustomStatus('waiting');
  const approval = context.df.waitForExternalEvent('Approval');
  const timeout = context.df.createTimer(new Date(context.df.currentUtcDateTime.getTime() + timeoutMs));
  const winner = yield context.df.Task.any([approval, timeout]);
  if (winner === approval) {
    timeout.cancel();
    return `Approved: ${JSON.stringify(approval.result)}`;
  }
  return 'Timed out waiting for approval';
});
