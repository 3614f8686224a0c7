// Answers request.params: query values beside the route's, as the real host gives them.
const { app } = require('@azure/functions');

app.http('echoParams', { route: 'params/{name}', methods: ['GET'], handler: (request) => ({ jsonBody: { ...request.params } }) });
