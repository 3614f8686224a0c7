/**
 * Azure Functions route templates: literal segments, `{name}`, `{name?}` (optional, last only), `{name:constraint}`
 * (constraints `int`, `guid`, `alpha` are checked; others are accepted as written), and `{*rest}` (catch-all).
 */
export interface CompiledRoute {
  readonly template: string;
  match(path: string): Record<string, string> | undefined;
}

const CONSTRAINTS: Record<string, string> = {
  int: '-?\\d+',
  guid: '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}',
  alpha: '[A-Za-z]+',
};

export function compileRoute(template: string): CompiledRoute {
  const names: string[] = [];
  const segments = template.replace(/^\/+|\/+$/g, '').split('/').filter((s) => s.length > 0);
  let pattern = '^';
  for (const segment of segments) {
    const param = /^\{(\*)?([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z]+)(?:\([^)]*\))?)?(\?)?\}$/.exec(segment);
    if (!param) {
      pattern += `/${escapeRegExp(segment)}`;
      continue;
    }
    const [, catchAll, name = '', constraint, optional] = param;
    names.push(name);
    const value = catchAll ? '.*' : constraint && CONSTRAINTS[constraint] ? CONSTRAINTS[constraint] : '[^/]+';
    pattern += optional || catchAll ? `(?:/(${value}))?` : `/(${value})`;
  }
  const regex = new RegExp(`${pattern}/?$`, 'i');
  return {
    template,
    match(path) {
      const found = regex.exec(path);
      if (!found) return undefined;
      const params: Record<string, string> = {};
      names.forEach((name, i) => {
        const raw = found[i + 1];
        if (raw !== undefined) params[name] = decodeURIComponent(raw);
      });
      return params;
    },
  };
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
