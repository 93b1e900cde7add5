"""The bottom line of keys: the screen's shown bindings, drawn as Textual's Footer draws them, by one widget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.color import Color
from textual.screen import Screen
from textual.strip import Strip

from gpumon.tui.cached_widgets import CachedLines

PALETTE_EDGE = "▏"
"""The left edge of the command palette's key (Footer draws it as a `vkey` border)."""


@dataclass(frozen=True)
class ShownKey:
    """One key on the bar: what a click sends, what is drawn, and whether its action is enabled."""

    key: str
    display: str
    description: str
    tooltip: str
    enabled: bool


@dataclass(frozen=True)
class DrawnKey:
    """A key as drawn: columns [start, end) of the bar, cut where the bar is too narrow."""

    key: ShownKey
    start: int
    end: int


def shown_keys(screen: Screen[object]) -> tuple[tuple[ShownKey, ...], ShownKey | None]:
    """The keys Footer would show for `screen`: the first shown binding of each action, in binding order; and the
    command palette's key where the app enables the palette."""
    app = screen.app
    active = screen.active_bindings
    keys: dict[str, ShownKey] = {}
    for _, binding, enabled, tooltip in active.values():
        if binding.show and binding.action not in keys:
            keys[binding.action] = ShownKey(
                binding.key, app.get_key_display(binding), binding.description, tooltip, enabled
            )
    palette = None
    if app.ENABLE_COMMAND_PALETTE and (found := active.get(app.COMMAND_PALETTE_BINDING)) is not None:
        _, binding, enabled, _ = found
        tooltip = binding.tooltip or binding.description
        palette = ShownKey(binding.key, app.get_key_display(binding), binding.description, tooltip, enabled)
    return tuple(keys.values()), palette


class KeyBar(CachedLines, can_focus=False):
    """Textual's Footer as one widget (no FooterKey children, no recompose): the same picture, clicks and tooltips,
    redrawn when the screen's bindings change. Binding groups are drawn as separate keys, and there is no compact
    style."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "key-bar--key",
        "key-bar--description",
        "key-bar--disabled",
        "key-bar--hover",
        "key-bar--palette-edge",
    }
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        & > .key-bar--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
            padding: 0 1;
        }
        & > .key-bar--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
            padding: 0 1 0 0;
        }
        & > .key-bar--disabled {
            text-style: dim;
        }
        & > .key-bar--hover {
            color: $footer-key-foreground;
            background: $block-hover-background;
        }
        & > .key-bar--palette-edge {
            color: $foreground 20%;
        }
    }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._keys: tuple[ShownKey, ...] = ()
        self._palette: ShownKey | None = None
        self._drawn: tuple[DrawnKey, ...] = ()
        self._hovered: ShownKey | None = None

    @property
    def drawn(self) -> tuple[DrawnKey, ...]:
        """The keys of the last drawing and where each lies on the bar; the palette's key, where shown, last."""
        return self._drawn

    def key_at(self, x: int) -> ShownKey | None:
        return next((drawn.key for drawn in self._drawn if drawn.start <= x < drawn.end), None)

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen: Screen[object]) -> None:
        if not screen.app.app_focus or not self.is_attached or screen is not self.screen:
            return
        keys, palette = shown_keys(screen)
        if (keys, palette) != (self._keys, self._palette):
            self._keys, self._palette = keys, palette
            self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base_background, background = self.background_colors
        blank = Style.from_color(bgcolor=(base_background + background).rich_color)
        if y:
            return Strip.blank(width, blank)
        palette = Strip(self._label(self._palette, palette=True)) if self._palette is not None else None
        room = max(width - (palette.cell_length if palette is not None else 0), 0)
        segments: list[Segment] = []
        drawn: list[DrawnKey] = []
        x = 0
        for key in self._keys:
            if x >= room:
                break
            label = self._label(key)
            segments += label
            drawn.append(DrawnKey(key, x, min(x + Segment.get_line_length(label), room)))
            x = drawn[-1].end
        line = Strip(segments).crop(0, room).adjust_cell_length(room, blank)
        if palette is not None and self._palette is not None:
            line = Strip.join([line, palette]).crop(0, width)
            drawn.append(DrawnKey(self._palette, room, width))
        self._drawn = tuple(drawn)
        return line

    def _label(self, key: ShownKey, *, palette: bool = False) -> list[Segment]:
        """A key as FooterKey draws it: ` key ` then `description `, dimmed when disabled, lit when hovered; the
        palette's key with its left edge and one cell of padding after it."""
        key_style = self.get_component_rich_style("key-bar--key")
        description_style = self.get_component_rich_style("key-bar--description")
        item = self.rich_style
        if key == self._hovered:
            item = self.get_component_rich_style("key-bar--hover")
            key_style = self._over(item, "key-bar--key", key_style)
            description_style = self._over(item, "key-bar--description", description_style)
        padding = Style.from_color(bgcolor=item.bgcolor)
        if not key.enabled:
            item += self.get_component_rich_style("key-bar--disabled", partial=True)
        key_style, description_style = item + key_style, item + description_style
        if not key.description:
            label = [Segment(key.display, key_style)]
        elif palette:  # compact, as Footer leaves the palette's FooterKey
            label = [Segment(key.display, key_style), Segment(" " + key.description, description_style)]
        else:
            key_padding = self.get_component_styles("key-bar--key").padding
            description_padding = self.get_component_styles("key-bar--description").padding
            label = [
                Segment(" " * key_padding.left + key.display + " " * key_padding.right, key_style),
                Segment(
                    " " * description_padding.left + key.description + " " * description_padding.right,
                    description_style,
                ),
            ]
        if palette:
            edge = self.get_component_rich_style("key-bar--palette-edge") + padding
            label = [Segment(PALETTE_EDGE, edge), *label, Segment(" ", padding)]
        return label

    def _over(self, hover: Style, component: str, style: Style) -> Style:
        """`style` of `component` on the hovered key: its background laid over the hover background, as Footer's
        component styles sit over the hovered FooterKey's."""
        if hover.bgcolor is None:
            return style
        background = Color.from_rich_color(hover.bgcolor) + self.get_component_styles(component).background
        return style + Style(bgcolor=background.rich_color)

    def on_mouse_down(self, event: events.MouseDown) -> None:
        key = self.key_at(event.x)
        if key is None:
            return
        if key.enabled:
            self.app.simulate_key(key.key)
        else:
            self.app.bell()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        self._hover(self.key_at(event.x))

    def on_leave(self) -> None:
        self._hover(None)

    def _hover(self, key: ShownKey | None) -> None:
        if key == self._hovered:
            return
        self._hovered = key
        self.tooltip = key.tooltip if key is not None and key.tooltip else None
        self.refresh()
