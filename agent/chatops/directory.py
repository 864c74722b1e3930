"""Who is who in chat: cluster users <-> DingTalk staff ids / mobiles / WeCom user ids, and approvers."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.config.settings import Settings


@dataclass
class UserDirectory:
    """users: cluster user -> {"dingtalk": staffId, "mobile": ..., "wecom": userid}; unmapped ids map to themselves."""

    users: dict[str, dict[str, str]] = field(default_factory=dict)
    approvers: list[str] = field(default_factory=list)  # chat ids, or cluster users (both are accepted)

    @classmethod
    def from_settings(cls, settings: Settings) -> UserDirectory:
        return cls(users=dict(settings.chatops_users), approvers=list(settings.chatops_approvers))

    def cluster_user(self, platform: str, chat_id: str) -> str:
        """The cluster user a chat id speaks for: the one mapped to it, else the id itself, except where the id is
        the name of a cluster user mapped to another id on this platform: only that id speaks for them there
        (WeCom user ids and cluster logins are often the same pinyin names), so it is `unverified:<id>`."""
        for user, ids in self.users.items():
            if ids.get(platform) == chat_id:
                return user
        return f"unverified:{chat_id}" if self._names_someone_else(platform, chat_id) else chat_id

    def _names_someone_else(self, platform: str, chat_id: str) -> bool:
        """`chat_id` is the name of a cluster user whose id on `platform` is another one."""
        mapped = self.users.get(chat_id, {}).get(platform)
        return mapped is not None and mapped != chat_id

    def chat_id(self, platform: str, cluster_user: str) -> str | None:
        return self.users.get(cluster_user, {}).get(platform)

    def mobile(self, cluster_user: str) -> str | None:
        return self.users.get(cluster_user, {}).get("mobile")

    def is_approver(self, platform: str, chat_id: str) -> bool:
        """Listed by chat id or by the cluster user the id speaks for; a bare id that names someone else is
        neither."""
        if not chat_id:
            return False
        listed = chat_id in self.approvers and not self._names_someone_else(platform, chat_id)
        return listed or self.cluster_user(platform, chat_id) in self.approvers
