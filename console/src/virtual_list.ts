// A list that keeps only the rows in view in the DOM: thousands of jobs or
// a 100,000-line log scroll as quickly as ten.

export class VirtualList<T> {
  readonly element: HTMLElement;
  private readonly spacer: HTMLElement;
  private readonly rows: HTMLElement;
  private items: T[] = [];

  constructor(private readonly rowHeight: number, private readonly render: (item: T, index: number) => HTMLElement,
              className = "vlist") {
    this.element = document.createElement("div");
    this.element.className = className;
    this.spacer = document.createElement("div");
    this.rows = document.createElement("div");
    this.rows.className = "vrows";
    this.spacer.append(this.rows);
    this.element.append(this.spacer);
    this.element.addEventListener("scroll", () => this.draw());
  }

  set(items: T[], stickToBottom = false) {
    const atBottom = this.element.scrollTop + this.element.clientHeight >= this.element.scrollHeight - this.rowHeight;
    this.items = items;
    this.spacer.style.height = `${items.length * this.rowHeight}px`;
    if (stickToBottom && atBottom) this.element.scrollTop = this.element.scrollHeight;
    this.draw();
  }

  // Shows the last rows (a log being followed starts at its end).
  scrollToEnd() {
    this.element.scrollTop = this.element.scrollHeight;
    this.draw();
  }

  get length() {
    return this.items.length;
  }

  private draw() {
    const first = Math.max(0, Math.floor(this.element.scrollTop / this.rowHeight) - 10);
    const count = Math.ceil((this.element.clientHeight || 600) / this.rowHeight) + 20;
    const shown: HTMLElement[] = [];
    for (let i = first; i < Math.min(this.items.length, first + count); i++) {
      const row = this.render(this.items[i], i);
      row.style.height = `${this.rowHeight}px`;
      shown.push(row);
    }
    this.rows.style.transform = `translateY(${first * this.rowHeight}px)`;
    this.rows.replaceChildren(...shown);
  }
}
