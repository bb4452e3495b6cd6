//! The sandbox's DNS server: names the policy allows resolve to the
//! gateway itself (which then connects on the sandbox's behalf); every other
//! name is NXDOMAIN at once. Nothing is asked upstream, so nothing leaves
//! through DNS.

use std::net::IpAddr;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};

use crate::policy::Policy;

/// Answers are short-lived: a policy can change.
const TTL: u32 = 5;

/// The answer to one query packet, or `None` for a packet that is not one.
pub fn answer(packet: &[u8], policy: &Policy, gateway: IpAddr) -> Option<Vec<u8>> {
    let query = Message::from_vec(packet).ok()?;
    if query.message_type() != MessageType::Query {
        return None;
    }
    let mut reply = Message::new();
    reply
        .set_id(query.id())
        .set_message_type(MessageType::Response)
        .set_op_code(query.op_code())
        .set_recursion_desired(query.recursion_desired())
        .set_recursion_available(true)
        .set_authoritative(true);
    let mut code = ResponseCode::NoError;
    for q in query.queries() {
        reply.add_query(q.clone());
        let name = q.name().to_utf8();
        if !policy.answers(&name) {
            code = ResponseCode::NXDomain;
            continue;
        }
        let data = match (q.query_type(), gateway) {
            (RecordType::A, IpAddr::V4(ip)) => Some(RData::A(A(ip))),
            (RecordType::AAAA, IpAddr::V6(ip)) => Some(RData::AAAA(AAAA(ip))),
            _ => None,
        };
        if let Some(data) = data {
            reply.add_answer(Record::from_rdata(q.name().clone(), TTL, data));
        }
    }
    reply.set_response_code(code);
    reply.to_vec().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Hosts, Rule};
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use std::str::FromStr;

    fn ask(name: &str, kind: RecordType) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(7).set_recursion_desired(true);
        m.add_query(Query::query(Name::from_str(name).unwrap(), kind));
        m.to_vec().unwrap()
    }

    #[test]
    fn listed_names_resolve_to_the_gateway_and_others_do_not_exist() {
        let policy = Policy {
            allow: vec![Rule {
                hosts: Hosts::Suffix("example.test".into()),
                port: None,
            }],
            deny: vec![],
        };
        let gw: IpAddr = "172.30.0.2".parse().unwrap();
        let reply = Message::from_vec(
            &answer(&ask("api.example.test.", RecordType::A), &policy, gw).unwrap(),
        )
        .unwrap();
        assert_eq!(reply.id(), 7);
        assert_eq!(reply.response_code(), ResponseCode::NoError);
        assert_eq!(reply.answers().len(), 1);
        assert_eq!(
            reply.answers()[0].data(),
            &RData::A(A("172.30.0.2".parse().unwrap()))
        );
        let v6 = Message::from_vec(
            &answer(&ask("api.example.test.", RecordType::AAAA), &policy, gw).unwrap(),
        )
        .unwrap();
        assert_eq!(v6.response_code(), ResponseCode::NoError);
        assert!(v6.answers().is_empty());
        let other = Message::from_vec(
            &answer(&ask("leak.evil.test.", RecordType::TXT), &policy, gw).unwrap(),
        )
        .unwrap();
        assert_eq!(other.response_code(), ResponseCode::NXDomain);
        assert!(other.answers().is_empty());
        assert!(answer(b"junk", &policy, gw).is_none());
    }
}
