import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { citationsIn, citedPaths, headingSlugs } from '../support/doc-citations';

/**
 * Nothing in the repository cites a file that is not in it: every relative Markdown link (and its heading), every
 * repository path and `*.md` file named in the documents and in code comments resolves to a file of the repository.
 */
const root = join(__dirname, '../..');

describe('citations in the repository', () => {
  it('when the documents and comments are read, then every file and heading they cite is in the repository', () => {
    // Act
    const broken = citationsIn(root)
      .filter((citation) => citation.problem !== undefined)
      .map((citation) => `${citation.file}:${citation.line}: ${citation.cited}: ${citation.problem}`);

    // Assert
    expect(broken).toEqual([]);
  });

  it('when the README is read, then it links the architecture and its layout names every top-level folder', () => {
    // Arrange
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const layout = /## Layout\n+```\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
    const folders = readdirSync(root, { withFileTypes: true })
      .filter((entry) => entry.isDirectory() && !entry.name.startsWith('.') && !['node_modules', 'dist', 'coverage', 'bench'].includes(entry.name))
      .map((entry) => entry.name);

    // Act
    const listed = layout.split('\n').map((line) => /^([\w-]+)\//.exec(line)?.[1]).filter(Boolean);

    // Assert
    expect(readme).toContain('](docs/architecture.md)');
    expect(folders.filter((folder) => !listed.includes(folder))).toEqual([]);
  });
});

describe('the citation checker', () => {
  const made = mkdtempSync(join(tmpdir(), 'doc-citations-'));
  afterAll(() => rmSync(made, { recursive: true, force: true }));
  const repository = (files: Record<string, string>) => {
    const at = mkdtempSync(join(made, 'repo-'));
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(at, path)), { recursive: true });
      writeFileSync(join(at, path), text);
    }
    return at;
  };
  const problems = (at: string) => citationsIn(at).filter((citation) => citation.problem !== undefined).map((citation) => [citation.file, citation.cited, citation.problem]);

  it('when a link, a heading, a path in backticks or a comment names what is not there, then each is reported', () => {
    // Arrange
    const at = repository({
      'README.md': '[a](docs/a.md) [gone](docs/gone.md) [b](docs/a.md#b) [nope](docs/a.md#nope) `shared/x.ts` `shared/y.ts`\n',
      'docs/a.md': '# A\n\n## B\n\n[up](../README.md)\n',
      'shared/x.ts': '/** See docs/a.md and DESIGN.md, "Layers". */\nexport const x = 1; // ../../kit/notes.md\n',
    });

    // Act
    const found = problems(at);

    // Assert
    expect(found).toEqual([
      ['README.md', 'docs/gone.md', 'no such file in the repository'],
      ['README.md', 'docs/a.md#nope', 'no heading #nope in it'],
      ['README.md', 'shared/y.ts', 'no such file in the repository'],
      ['shared/x.ts', 'DESIGN.md', 'no such file in the repository'],
      ['shared/x.ts', '../../kit/notes.md', 'outside the repository'],
    ]);
  });

  it('when paths are in code blocks, in strings, or are URLs and placeholders, then they are not citations', () => {
    const at = repository({
      'README.md': '```\ncat docs/none.md\n```\n[site](https://example.com/x.md) `shared/{tenant}/x.ts`\n',
      'shared/x.ts': "export const file = 'docs/none.md';\n",
    });
    expect(problems(at)).toEqual([]);
  });

  it('when a path has a wildcard, then it holds when some file matches it', () => {
    const at = repository({ 'README.md': '`shared/iac/pulumi-*.ts` `shared/iac/local-*.ts`\n', 'shared/iac/pulumi-runner.ts': '' });
    expect(problems(at)).toEqual([['README.md', 'shared/iac/local-*.ts', 'no such file in the repository']]);
  });

  it('when headings carry code and punctuation, then their anchors are slugged as GitHub does', () => {
    expect([...headingSlugs("# API (under `/runtime-cloud`)\n## The local cloud's out-of-band endpoints\n## API\n")]).toEqual([
      'api-under-runtime-cloud',
      'the-local-clouds-out-of-band-endpoints',
      'api',
    ]);
  });

  it('when text names relative paths and Markdown files, then those are what it cites', () => {
    expect(citedPaths('see ../kit/fixtures/README.md, section 2, `local/engine/` and contracts/README.md.')).toEqual([
      'local/engine/',
      '../kit/fixtures/README.md',
      'contracts/README.md',
    ]);
  });
});
