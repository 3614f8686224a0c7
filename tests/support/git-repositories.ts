import * as fs from 'node:fs';
import { dirname, join } from 'node:path';
import * as git from 'isomorphic-git';

/** A Git repository with a work tree, made with isomorphic-git in a test's own temporary folder. */
export class TestRepository {
  private constructor(readonly dir: string) {}

  static async init(dir: string): Promise<TestRepository> {
    await git.init({ fs, dir, defaultBranch: 'main' });
    return new TestRepository(dir);
  }

  /** Writes (text) or deletes (`null`) files, stages exactly those changes, commits, and returns the commit sha. */
  async commit(changes: Record<string, string | null>, message = 'change'): Promise<string> {
    for (const [filepath, content] of Object.entries(changes)) {
      const file = join(this.dir, filepath);
      if (content === null) {
        fs.rmSync(file);
        await git.remove({ fs, dir: this.dir, filepath });
      } else {
        fs.mkdirSync(dirname(file), { recursive: true });
        fs.writeFileSync(file, content);
        await git.add({ fs, dir: this.dir, filepath });
      }
    }
    return git.commit({ fs, dir: this.dir, message, author: { name: 'Test', email: 'test@example.com' } });
  }
}
