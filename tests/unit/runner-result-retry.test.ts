import { describe, expect, it } from 'vitest';
import { postResult } from '../../runner/agent';
import { AppError } from '../../shared/platform/errors/app-error';

/** Hole 1 on the runner path (issue 19): an outcome the host did not answer is offered again, not dropped. */
describe("the agent's result post", () => {
  it('when the host is unreachable and then answers 503, then the outcome is posted again until accepted', async () => {
    const answers = [new TypeError('fetch failed'), new AppError('STORE.UNAVAILABLE', 'unavailable', 'the store did not answer')];
    let posts = 0;
    await postResult(async () => {
      posts++;
      const answer = answers.shift();
      if (answer) throw answer;
    }, undefined);
    expect(posts).toBe(3);
  });

  it('when the host refuses the outcome (the job superseded), then it is not posted again', async () => {
    let posts = 0;
    const refused = postResult(async () => {
      posts++;
      throw new AppError('RUNNER.JOB_SUPERSEDED', 'conflict', 'superseded');
    }, undefined);
    await expect(refused).rejects.toThrow('superseded');
    expect(posts).toBe(1);
  });

  it('when the agent is stopping, then a failed post is not retried', async () => {
    const controller = new AbortController();
    controller.abort();
    let posts = 0;
    const stopped = postResult(async () => {
      posts++;
      throw new TypeError('fetch failed');
    }, controller.signal);
    await expect(stopped).rejects.toThrow('fetch failed');
    expect(posts).toBe(1);
  });
});
