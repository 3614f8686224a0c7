// The end-to-end app's LargeOutputOrchestrator (an activity returns ~1 MB), and a fan-out/fan-in of many activities.
const df = require('durable-functions');

df.app.activity('large_output', { handler: (sizeInKB) => 'A'.repeat(sizeInKB * 1024) });

df.app.orchestration('LargeOutputOrchestrator', function* (context) {
  const sizeInKB = context.df.getInput();
  const hello = yield context.df.callActivity('sayHello', 'Tokyo');
  const large = yield context.df.callActivity('large_output', sizeInKB);
  return [hello, large];
});

df.app.activity('fan_out_square', { handler: (n) => n * n });

df.app.orchestration('FanOutFanIn', function* (context) {
  const count = context.df.getInput();
  const tasks = [];
  for (let i = 1; i <= count; i++) tasks.push(context.df.callActivity('fan_out_square', i));
  const squares = yield context.df.Task.all(tasks);
  return { count: squares.length, sum: squares.reduce((a, b) => a + b, 0) };
});
