// Features the local host does not carry out: each call fails as a task the orchestrator catches, naming the feature.
const df = require('durable-functions');

df.app.orchestration('RefusedFeatures', function* (context) {
  const caught = [];
  try {
    yield context.df.callEntity(new df.EntityId('counter', 'one'), 'add', 1);
  } catch (error) {
    caught.push(error.message);
  }
  try {
    yield context.df.callHttp({ method: 'GET', url: 'http://127.0.0.1:1/' });
  } catch (error) {
    caught.push(error.message);
  }
  return caught;
});
