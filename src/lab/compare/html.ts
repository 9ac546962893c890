export function renderHtml(_r: unknown): string { return ''; }
