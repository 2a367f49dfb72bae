//! Real 429s from the API server's own API Priority and Fairness: a tiny
//! PriorityLevelConfiguration and a FlowSchema sending one identity's
//! requests to it (`flowcontrol.apiserver.k8s.io/v1`).
//!
//! How the level throttles (`apiserver/pkg/util/flowcontrol`): its
//! concurrency limit is `ceil(server limit × shares / sum of all levels'
//! shares)`, with the server limit 600 (`--max-requests-inflight` 400 +
//! `--max-mutating-requests-inflight` 200) and the default levels' shares
//! summing to 245; so 1 share is 3 seats and 0 shares is 0 seats. The level
//! neither lends nor borrows seats. Without a queue (the default) a request
//! that finds no free seat is rejected at once with APF's 429 (plain text
//! `Too many requests, please try again later.`, `Retry-After`); with 0
//! seats one request still runs when nothing else of the level does, so
//! the identity is served one request at a time and every overlapping one
//! is rejected. Watches hold a seat only while they start.
//!
//! ```no_run
//! # async fn demo(admin: kube::Client) -> anyhow::Result<()> {
//! use tcab_api_proxy::apf::ThrottleLevel;
//! let level = ThrottleLevel::for_user("tcab-throttle", "dispatcher").install(&admin).await?;
//! // ... the dispatcher meets real 429s ...
//! level.remove(&admin).await?;
//! # Ok(()) }
//! ```

use k8s_openapi::api::flowcontrol::v1::{
    FlowDistinguisherMethod, FlowSchema, FlowSchemaSpec, GroupSubject, LimitResponse,
    LimitedPriorityLevelConfiguration, NonResourcePolicyRule, PolicyRulesWithSubjects,
    PriorityLevelConfiguration, PriorityLevelConfigurationReference,
    PriorityLevelConfigurationSpec, QueuingConfiguration, ResourcePolicyRule,
    ServiceAccountSubject, Subject, UserSubject,
};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use std::time::Duration;

/// Whose requests the level takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApfSubject {
    /// A user name (a static token's user).
    User(String),
    /// Every member of a group.
    Group(String),
    /// A ServiceAccount (`system:serviceaccount:<ns>:<name>`).
    ServiceAccount {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl ApfSubject {
    fn to_subject(&self) -> Subject {
        match self {
            ApfSubject::User(name) => Subject {
                kind: "User".into(),
                user: Some(UserSubject { name: name.clone() }),
                ..Subject::default()
            },
            ApfSubject::Group(name) => Subject {
                kind: "Group".into(),
                group: Some(GroupSubject { name: name.clone() }),
                ..Subject::default()
            },
            ApfSubject::ServiceAccount { namespace, name } => Subject {
                kind: "ServiceAccount".into(),
                service_account: Some(ServiceAccountSubject {
                    namespace: namespace.clone(),
                    name: name.clone(),
                }),
                ..Subject::default()
            },
        }
    }
}

/// A tiny priority level and the flow schema that sends one subject to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleLevel {
    /// The name of both objects.
    pub name: String,
    /// Whose requests it takes.
    pub subject: ApfSubject,
    /// `nominalConcurrencyShares` (default 1: 3 seats on a default server;
    /// 0: one request at a time, see the module docs).
    pub shares: i32,
    /// `Some(n)`: one queue of `n` requests (requests wait up to the
    /// server's 15 s queuing limit before a 429); `None`: rejected at once.
    pub queue_length: Option<i32>,
    /// The flow schema's `matchingPrecedence` (default 50: before every
    /// default schema but `exempt` (1) and `probes` (2); `system:masters`
    /// stays exempt whatever this says).
    pub matching_precedence: i32,
}

/// Label on both objects, to find leftovers.
pub const MANAGED_BY: &str = "tcab-api-proxy";

/// Why installing or removing the level failed.
#[derive(Debug, thiserror::Error)]
pub enum ApfError {
    /// An API call failed.
    #[error("{what}")]
    Api {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// The API server did not take the flow schema in within the bound.
    #[error(
        "the API server did not take flow schema {name:?} in within {waited:?} (its Dangling condition: {seen})"
    )]
    NotTakenIn {
        /// The flow schema.
        name: String,
        /// How long it waited.
        waited: Duration,
        /// The last condition seen.
        seen: String,
    },
}

impl ThrottleLevel {
    /// A level of 1 share, no queue, for requests of user `user`.
    pub fn for_user(name: impl Into<String>, user: impl Into<String>) -> Self {
        ThrottleLevel {
            name: name.into(),
            subject: ApfSubject::User(user.into()),
            shares: 1,
            queue_length: None,
            matching_precedence: 50,
        }
    }

    /// The same level with `shares` nominal shares.
    pub fn shares(mut self, shares: i32) -> Self {
        self.shares = shares;
        self
    }

    /// The two objects: the priority level and the flow schema.
    pub fn objects(&self) -> (PriorityLevelConfiguration, FlowSchema) {
        let meta = ObjectMeta {
            name: Some(self.name.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    MANAGED_BY.to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        };
        let limit_response = match self.queue_length {
            None => LimitResponse {
                type_: "Reject".into(),
                queuing: None,
            },
            Some(n) => LimitResponse {
                type_: "Queue".into(),
                queuing: Some(QueuingConfiguration {
                    queues: Some(1),
                    hand_size: Some(1),
                    queue_length_limit: Some(n),
                }),
            },
        };
        let pl = PriorityLevelConfiguration {
            metadata: meta.clone(),
            spec: PriorityLevelConfigurationSpec {
                type_: "Limited".into(),
                limited: Some(LimitedPriorityLevelConfiguration {
                    nominal_concurrency_shares: Some(self.shares),
                    lendable_percent: Some(0),
                    borrowing_limit_percent: Some(0),
                    limit_response,
                }),
                exempt: None,
            },
            status: None,
        };
        let fs = FlowSchema {
            metadata: meta,
            spec: FlowSchemaSpec {
                priority_level_configuration: PriorityLevelConfigurationReference {
                    name: self.name.clone(),
                },
                matching_precedence: Some(self.matching_precedence),
                distinguisher_method: Some(FlowDistinguisherMethod {
                    type_: "ByUser".into(),
                }),
                rules: Some(vec![PolicyRulesWithSubjects {
                    subjects: vec![self.subject.to_subject()],
                    resource_rules: Some(vec![ResourcePolicyRule {
                        verbs: vec!["*".into()],
                        api_groups: vec!["*".into()],
                        resources: vec!["*".into()],
                        cluster_scope: Some(true),
                        namespaces: Some(vec!["*".into()]),
                    }]),
                    non_resource_rules: Some(vec![NonResourcePolicyRule {
                        verbs: vec!["*".into()],
                        non_resource_urls: vec!["*".into()],
                    }]),
                }]),
            },
            status: None,
        };
        (pl, fs)
    }

    /// Creates (or updates, by server-side apply) both objects with an
    /// admin client, then waits until the API server has taken the flow
    /// schema in (its `Dangling` condition is `False`), at most 20 s.
    pub async fn install(&self, client: &kube::Client) -> Result<InstalledLevel, ApfError> {
        let (pl, fs) = self.objects();
        let pp = PatchParams::apply(MANAGED_BY).force();
        let api_err = |what: String| move |source| ApfError::Api { what, source };
        let pls: Api<PriorityLevelConfiguration> = Api::all(client.clone());
        pls.patch(&self.name, &pp, &Patch::Apply(&pl))
            .await
            .map_err(api_err(format!("applying priority level {:?}", self.name)))?;
        let fss: Api<FlowSchema> = Api::all(client.clone());
        fss.patch(&self.name, &pp, &Patch::Apply(&fs))
            .await
            .map_err(api_err(format!("applying flow schema {:?}", self.name)))?;
        let bound = Duration::from_secs(20);
        let started = tokio::time::Instant::now();
        let mut seen = "none yet".to_string();
        while started.elapsed() < bound {
            let now = fss
                .get(&self.name)
                .await
                .map_err(api_err(format!("reading flow schema {:?}", self.name)))?;
            let dangling = now
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "Dangling");
            if let Some(c) = dangling {
                if c.status.as_deref() == Some("False") {
                    return Ok(InstalledLevel {
                        name: self.name.clone(),
                    });
                }
                seen = format!(
                    "{} ({})",
                    c.status.unwrap_or_default(),
                    c.message.unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(ApfError::NotTakenIn {
            name: self.name.clone(),
            waited: bound,
            seen,
        })
    }
}

/// An installed level; [`InstalledLevel::remove`] deletes it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "remove the level when done, or it throttles on"]
pub struct InstalledLevel {
    name: String,
}

impl InstalledLevel {
    /// The name of both objects.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the flow schema, then the priority level (a missing one is
    /// fine). The identity is classified as before at once.
    pub async fn remove(self, client: &kube::Client) -> Result<(), ApfError> {
        let dp = DeleteParams::default();
        let fss: Api<FlowSchema> = Api::all(client.clone());
        let pls: Api<PriorityLevelConfiguration> = Api::all(client.clone());
        let gone = |r: Result<(), kube::Error>, what: &str| match r {
            Ok(()) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(source) => Err(ApfError::Api {
                what: format!("deleting {what} {:?}", self.name),
                source,
            }),
        };
        gone(fss.delete(&self.name, &dp).await.map(drop), "flow schema")?;
        gone(
            pls.delete(&self.name, &dp).await.map(drop),
            "priority level",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_level_takes_every_request_of_one_user_and_lends_and_borrows_nothing() {
        let (pl, fs) = ThrottleLevel::for_user("tcab-throttle", "dispatcher").objects();
        let pl = serde_json::to_value(&pl).unwrap();
        assert_eq!(pl["apiVersion"], "flowcontrol.apiserver.k8s.io/v1");
        assert_eq!(pl["kind"], "PriorityLevelConfiguration");
        assert_eq!(
            pl["spec"],
            json!({"type": "Limited", "limited": {
                "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"}}})
        );
        assert_eq!(
            pl["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "tcab-api-proxy"
        );
        let fs = serde_json::to_value(&fs).unwrap();
        assert_eq!(fs["kind"], "FlowSchema");
        assert_eq!(
            fs["spec"]["priorityLevelConfiguration"]["name"],
            "tcab-throttle"
        );
        assert_eq!(fs["spec"]["matchingPrecedence"], 50);
        assert_eq!(fs["spec"]["distinguisherMethod"]["type"], "ByUser");
        let rules = &fs["spec"]["rules"][0];
        assert_eq!(
            rules["subjects"],
            json!([{"kind": "User", "user": {"name": "dispatcher"}}])
        );
        assert_eq!(
            rules["resourceRules"],
            json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}])
        );
        assert_eq!(
            rules["nonResourceRules"],
            json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}])
        );
    }

    #[test]
    fn a_queue_and_other_subjects() {
        let mut level = ThrottleLevel::for_user("l", "u").shares(0);
        level.queue_length = Some(5);
        level.subject = ApfSubject::ServiceAccount {
            namespace: "tcab".into(),
            name: "dispatcher".into(),
        };
        let (pl, fs) = level.objects();
        let pl = serde_json::to_value(&pl).unwrap();
        assert_eq!(pl["spec"]["limited"]["nominalConcurrencyShares"], 0);
        assert_eq!(
            pl["spec"]["limited"]["limitResponse"],
            json!({"type": "Queue", "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 5}})
        );
        let fs = serde_json::to_value(&fs).unwrap();
        assert_eq!(
            fs["spec"]["rules"][0]["subjects"],
            json!([{"kind": "ServiceAccount", "serviceAccount": {"namespace": "tcab", "name": "dispatcher"}}])
        );
        let group = ApfSubject::Group("g".into()).to_subject();
        assert_eq!(
            serde_json::to_value(group).unwrap(),
            json!({"kind": "Group", "group": {"name": "g"}})
        );
    }
}
