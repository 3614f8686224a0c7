import { describe, expect, it } from 'vitest';
import { filesDigest, filesOfStack } from '../../shared/platform/iac/runner-job';

describe('the files a runner job is handed', () => {
  const project = {
    'Pulumi.yaml': 'name: app\nruntime: yaml\n',
    'Pulumi.dev.yaml': 'config: {}\n',
    'Pulumi.dev.eu.yml': 'config: {}\n',
    'Pulumi.prod.yaml': 'config: {}\n',
    'lib/Pulumi.dev.yaml': 'not a stack file: not beside Pulumi.yaml\n',
    'README.md': '# app\n',
  };

  it("when a project has several stacks, then a job of one gets every file but the other stacks' config files", () => {
    expect(Object.keys(filesOfStack(project, 'dev')).sort()).toEqual(['Pulumi.dev.yaml', 'Pulumi.yaml', 'README.md', 'lib/Pulumi.dev.yaml']);
  });

  it('when the stack name has a dot in it, then its own config file is kept and the shorter name is not mistaken for it', () => {
    expect(Object.keys(filesOfStack(project, 'dev.eu')).sort()).toEqual(['Pulumi.dev.eu.yml', 'Pulumi.yaml', 'README.md', 'lib/Pulumi.dev.yaml']);
  });

  it('when the files differ by one byte or one name, then their digests differ', () => {
    const digest = filesDigest(project);
    expect(filesDigest({ ...project, 'README.md': '# app!\n' })).not.toBe(digest);
    expect(filesDigest({ ...project, 'README.txt': '# app\n' })).not.toBe(digest);
    expect(filesDigest({ ...project })).toBe(digest);
  });
});
