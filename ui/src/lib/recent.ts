// Recently viewed items, for the start page (local storage: ids and names only).
export type Kind = 'task' | 'group' | 'queue' | 'graph';
export interface Recent {
  kind: Kind;
  id: string;
  title?: string;
  at: number;
}

const KEY = 'tcq-inspector-recent';
const MAX = 12;

export function recentItems(): Recent[] {
  try {
    const v = JSON.parse(localStorage.getItem(KEY) ?? '[]');
    return Array.isArray(v) ? v.filter((r) => r && typeof r.id === 'string' && typeof r.kind === 'string') : [];
  } catch {
    return [];
  }
}

export function remember(kind: Kind, id: string, title?: string) {
  try {
    const items = recentItems().filter((r) => !(r.kind === kind && r.id === id));
    items.unshift({ kind, id, title, at: Date.now() });
    localStorage.setItem(KEY, JSON.stringify(items.slice(0, MAX)));
  } catch {
    // Storage full or disabled: the list is a convenience.
  }
}
