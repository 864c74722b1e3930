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
        for user, ids in self.users.items():
            if ids.get(platform) == chat_id:
                return user
        return chat_id

    def chat_id(self, platform: str, cluster_user: str) -> str | None:
        return self.users.get(cluster_user, {}).get(platform)

    def mobile(self, cluster_user: str) -> str | None:
        return self.users.get(cluster_user, {}).get("mobile")

    def is_approver(self, platform: str, chat_id: str) -> bool:
        return bool(chat_id) and (chat_id in self.approvers or self.cluster_user(platform, chat_id) in self.approvers)
