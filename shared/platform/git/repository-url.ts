/** The URL without user name and password, for messages and logs. Pure: views load it without the Git client. */
export function redactUrl(repository: string): string {
  if (!URL.canParse(repository)) return repository;
  const url = new URL(repository);
  if (!url.username && !url.password) return repository;
  url.username = '';
  url.password = '';
  return url.href;
}
