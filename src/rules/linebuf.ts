// kube-proxy's LineBuffer: each write is one line, its words (strings or string arrays,
// flattened) joined by single spaces. Empty arrays contribute nothing.

export type Words = string | readonly string[];

export class LineBuffer {
  private readonly lines: string[] = [];

  write(...words: Words[]): void {
    const flat: string[] = [];
    for (const w of words) {
      if (typeof w === 'string') flat.push(w);
      else flat.push(...w);
    }
    this.lines.push(flat.join(' '));
  }

  get length(): number {
    return this.lines.length;
  }

  text(): string {
    return this.lines.length === 0 ? '' : `${this.lines.join('\n')}\n`;
  }
}
