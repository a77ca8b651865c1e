-- The schema every migration leaves in a blank database (tests/storage/test_schema_file.py
-- checks it). Regenerate: python -m tests.support.schema

-- table mate_agent
CREATE TABLE mate_agent (
                id INTEGER PRIMARY KEY,
                name TEXT NOT NULL,
                create_time TEXT NOT NULL,
                update_time TEXT NOT NULL
            );

-- table mate_chat_agent
CREATE TABLE mate_chat_agent (
                chat_key TEXT PRIMARY KEY,
                agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
                create_time TEXT NOT NULL
            );

-- table mate_conversation
CREATE TABLE mate_conversation (
                id TEXT PRIMARY KEY,
                agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
                channel TEXT NOT NULL,
                chat_key TEXT NOT NULL,
                title TEXT,
                trigger_source TEXT NOT NULL,
                summary TEXT,
                summary_upto_message_id INTEGER NOT NULL DEFAULT 0,
                memory_upto_message_id INTEGER NOT NULL DEFAULT 0,
                create_time TEXT NOT NULL,
                update_time TEXT NOT NULL,
                archived INTEGER NOT NULL DEFAULT 0
            , message_count INTEGER NOT NULL DEFAULT 0, is_group INTEGER NOT NULL DEFAULT 0);

-- table mate_cron_job
CREATE TABLE "mate_cron_job" (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
        name TEXT NOT NULL,
        cron_expression TEXT NOT NULL,
        timezone TEXT NOT NULL,
        task_type TEXT NOT NULL CHECK (task_type IN ('text', 'emergence', 'reminder')),
        trigger_message TEXT NOT NULL DEFAULT '',
        enabled INTEGER NOT NULL DEFAULT 1,
        last_run_time TEXT,
        next_run_time TEXT,
        create_time TEXT NOT NULL,
        update_time TEXT NOT NULL,
        target_channel TEXT,
        target_chat_id TEXT,
        target_thread_id TEXT,
        run_at TEXT,
        created_by TEXT,
        created_by_name TEXT,
        missed_time TEXT,
        target_place_id TEXT
    );

-- table mate_embedding
CREATE TABLE mate_embedding (
                key INTEGER NOT NULL,
                model TEXT NOT NULL,
                agent_id INTEGER NOT NULL,
                dim INTEGER NOT NULL,
                vector BLOB NOT NULL,
                norm REAL NOT NULL,
                create_time TEXT NOT NULL,
                PRIMARY KEY (key, model)
            );

-- table mate_file_piece
CREATE TABLE mate_file_piece (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        file_id INTEGER NOT NULL,
        start INTEGER NOT NULL,
        length INTEGER NOT NULL,
        create_time TEXT NOT NULL
    );

-- table mate_incognito
CREATE TABLE mate_incognito (
        conversation_id TEXT PRIMARY KEY,
        after_message_id INTEGER NOT NULL,
        start_time TEXT NOT NULL
    );

-- table mate_lease
CREATE TABLE mate_lease (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires_time TEXT NOT NULL
    );

-- table mate_llm_usage
CREATE TABLE mate_llm_usage (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                agent_id INTEGER,
                conversation_id TEXT,
                purpose TEXT NOT NULL,
                model TEXT NOT NULL DEFAULT '',
                input_tokens INTEGER NOT NULL DEFAULT 0,
                cache_creation_input_tokens INTEGER NOT NULL DEFAULT 0,
                cache_read_input_tokens INTEGER NOT NULL DEFAULT 0,
                output_tokens INTEGER NOT NULL DEFAULT 0,
                create_time TEXT NOT NULL
            );

-- table mate_memory_pending
CREATE TABLE mate_memory_pending (
                conversation_id TEXT PRIMARY KEY REFERENCES mate_conversation(id),
                agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
                upto_message_id INTEGER NOT NULL,
                trigger_source TEXT NOT NULL DEFAULT 'channel',
                attempts INTEGER NOT NULL DEFAULT 0,
                due_time TEXT NOT NULL,
                last_error TEXT,
                create_time TEXT NOT NULL
            );

-- table mate_memory_proposal
CREATE TABLE mate_memory_proposal (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id INTEGER NOT NULL,
        filename TEXT NOT NULL,
        base_version INTEGER NOT NULL,
        content TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        run_id INTEGER,
        status TEXT NOT NULL DEFAULT 'pending',
        create_time TEXT NOT NULL,
        expire_time TEXT NOT NULL
    );

-- table mate_memory_run
CREATE TABLE mate_memory_run (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                agent_id INTEGER NOT NULL,
                kind TEXT NOT NULL,
                conversation_id TEXT,
                status TEXT NOT NULL,
                reason TEXT,
                started TEXT NOT NULL,
                finished TEXT,
                error TEXT
            );

-- table mate_message
CREATE TABLE mate_message (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                conversation_id TEXT NOT NULL REFERENCES mate_conversation(id),
                role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
                content TEXT NOT NULL,
                token_count INTEGER NOT NULL DEFAULT 0,
                sender_id TEXT,
                sender_name TEXT,
                create_time TEXT NOT NULL
            , content_format TEXT NOT NULL DEFAULT 'text'
                CHECK (content_format IN ('text', 'blocks')), external_id TEXT);

-- table mate_message_fact
CREATE TABLE mate_message_fact (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id INTEGER NOT NULL REFERENCES mate_message(id) ON DELETE CASCADE,
        fact TEXT NOT NULL,
        run_id INTEGER,
        create_time TEXT NOT NULL
    );

-- table mate_person
CREATE TABLE mate_person (
                id INTEGER PRIMARY KEY,
                name TEXT NOT NULL,
                create_time TEXT NOT NULL
            );

-- table mate_person_account
CREATE TABLE mate_person_account (
                channel TEXT NOT NULL,
                sender_id TEXT NOT NULL,
                person_id INTEGER NOT NULL REFERENCES mate_person(id) ON DELETE CASCADE,
                source TEXT NOT NULL DEFAULT 'contact',
                PRIMARY KEY (channel, sender_id)
            );

-- table mate_search_scope
CREATE TABLE mate_search_scope (
        key INTEGER PRIMARY KEY,
        agent_id INTEGER NOT NULL
    );

-- table mate_search_text
CREATE VIRTUAL TABLE mate_search_text USING fts5(
        body, scope, prev, date, facts, tokenize = 'porter unicode61 remove_diacritics 2');

-- table mate_search_text_config
CREATE TABLE 'mate_search_text_config'(k PRIMARY KEY, v) WITHOUT ROWID;

-- table mate_search_text_content
CREATE TABLE 'mate_search_text_content'(id INTEGER PRIMARY KEY, c0, c1, c2, c3, c4);

-- table mate_search_text_data
CREATE TABLE 'mate_search_text_data'(id INTEGER PRIMARY KEY, block BLOB);

-- table mate_search_text_docsize
CREATE TABLE 'mate_search_text_docsize'(id INTEGER PRIMARY KEY, sz BLOB);

-- table mate_search_text_idx
CREATE TABLE 'mate_search_text_idx'(segid, term, pgno, PRIMARY KEY(segid, term)) WITHOUT ROWID;

-- table mate_search_trigram
CREATE VIRTUAL TABLE mate_search_trigram USING fts5(
                body, scope, source UNINDEXED, agent_id UNINDEXED, conversation_id UNINDEXED, ref_id UNINDEXED,
                filename UNINDEXED, time UNINDEXED, tokenize = 'trigram');

-- table mate_search_trigram_config
CREATE TABLE 'mate_search_trigram_config'(k PRIMARY KEY, v) WITHOUT ROWID;

-- table mate_search_trigram_content
CREATE TABLE 'mate_search_trigram_content'(id INTEGER PRIMARY KEY, c0, c1, c2, c3, c4, c5, c6, c7);

-- table mate_search_trigram_data
CREATE TABLE 'mate_search_trigram_data'(id INTEGER PRIMARY KEY, block BLOB);

-- table mate_search_trigram_docsize
CREATE TABLE 'mate_search_trigram_docsize'(id INTEGER PRIMARY KEY, sz BLOB);

-- table mate_search_trigram_idx
CREATE TABLE 'mate_search_trigram_idx'(segid, term, pgno, PRIMARY KEY(segid, term)) WITHOUT ROWID;

-- table mate_workspace_file
CREATE TABLE mate_workspace_file (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                agent_id INTEGER NOT NULL REFERENCES mate_agent(id),
                filename TEXT NOT NULL,
                content TEXT NOT NULL DEFAULT '',
                file_size INTEGER NOT NULL DEFAULT 0,
                enabled INTEGER NOT NULL DEFAULT 0,
                sort_order INTEGER NOT NULL DEFAULT 0,
                create_time TEXT NOT NULL,
                update_time TEXT NOT NULL,
                deleted INTEGER NOT NULL DEFAULT 0,
                version INTEGER NOT NULL DEFAULT 1
            );

-- table mate_workspace_file_history
CREATE TABLE mate_workspace_file_history (
        file_id INTEGER NOT NULL,
        version INTEGER NOT NULL,
        content TEXT NOT NULL,
        run_id INTEGER,
        change TEXT NOT NULL CHECK (change IN ('extraction', 'emergence', 'tool', 'api', 'import', 'undo')),
        create_time TEXT NOT NULL,
        PRIMARY KEY (file_id, version)
    );

-- table schema_version
CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_time TEXT NOT NULL);

-- table sqlite_sequence
CREATE TABLE sqlite_sequence(name,seq);

-- index ix_conversation_chat
CREATE INDEX ix_conversation_chat ON mate_conversation(chat_key, archived);

-- index ix_conversation_update
CREATE INDEX ix_conversation_update ON mate_conversation(update_time);

-- index ix_cron_job_due
CREATE INDEX ix_cron_job_due ON mate_cron_job(next_run_time)
        WHERE task_type = 'reminder' AND enabled = 1;

-- index ix_cron_job_runnable
CREATE INDEX ix_cron_job_runnable ON mate_cron_job(next_run_time) WHERE enabled = 1;

-- index ix_cron_job_target
CREATE INDEX ix_cron_job_target ON mate_cron_job(target_channel, target_chat_id)
        WHERE task_type = 'reminder';

-- index ix_embedding_agent
CREATE INDEX ix_embedding_agent ON mate_embedding(agent_id, model);

-- index ix_file_piece_file
CREATE INDEX ix_file_piece_file ON mate_file_piece(file_id);

-- index ix_llm_usage_time
CREATE INDEX ix_llm_usage_time ON mate_llm_usage(create_time);

-- index ix_memory_proposal_agent
CREATE INDEX ix_memory_proposal_agent ON mate_memory_proposal(agent_id, status);

-- index ix_memory_run_agent
CREATE INDEX ix_memory_run_agent ON mate_memory_run(agent_id, id);

-- index ix_message_conversation
CREATE INDEX ix_message_conversation ON mate_message(conversation_id, id);

-- index ix_message_external
CREATE INDEX ix_message_external ON mate_message(conversation_id, external_id)
                WHERE external_id IS NOT NULL;

-- index ix_message_fact_message
CREATE INDEX ix_message_fact_message ON mate_message_fact(message_id);

-- index ix_message_fact_run
CREATE INDEX ix_message_fact_run ON mate_message_fact(run_id);

-- index ix_person_account_person
CREATE INDEX ix_person_account_person ON mate_person_account(person_id);

-- index ix_workspace_file_history_run
CREATE INDEX ix_workspace_file_history_run ON mate_workspace_file_history(run_id);

-- index ux_workspace_file_live
CREATE UNIQUE INDEX ux_workspace_file_live
                ON mate_workspace_file(agent_id, filename) WHERE deleted = 0;

-- trigger tr_embedding_message_delete
CREATE TRIGGER tr_embedding_message_delete AFTER DELETE ON mate_message BEGIN
                DELETE FROM mate_embedding WHERE key = OLD.id * 2;
            END;

-- trigger tr_embedding_message_update
CREATE TRIGGER tr_embedding_message_update
                AFTER UPDATE OF content, role, content_format ON mate_message BEGIN
                DELETE FROM mate_embedding WHERE key = OLD.id * 2;
            END;

-- trigger tr_message_inserted
CREATE TRIGGER tr_message_inserted AFTER INSERT ON mate_message BEGIN
                UPDATE mate_conversation
                SET update_time = NEW.create_time,
                    message_count = message_count + (NEW.role IN ('user', 'assistant'))
                WHERE id = NEW.conversation_id;
            END;

-- trigger tr_piece_file_append
CREATE TRIGGER tr_piece_file_append AFTER UPDATE OF content ON mate_workspace_file
        WHEN NEW.deleted = 0 AND OLD.deleted = 0 AND NEW.agent_id = OLD.agent_id AND NEW.filename = OLD.filename AND length(CAST(NEW.content AS BLOB)) > length(CAST(OLD.content AS BLOB)) AND substr(CAST(NEW.content AS BLOB), 1, length(CAST(OLD.content AS BLOB))) = CAST(OLD.content AS BLOB) BEGIN
        INSERT INTO mate_file_piece(file_id, start, length, create_time)
            VALUES (NEW.id, length(CAST(OLD.content AS BLOB)), length(CAST(NEW.content AS BLOB)) - length(CAST(OLD.content AS BLOB)), NEW.update_time);
    END;

-- trigger tr_piece_file_delete
CREATE TRIGGER tr_piece_file_delete AFTER DELETE ON mate_workspace_file BEGIN
        DELETE FROM mate_file_piece WHERE file_id = OLD.id;
    END;

-- trigger tr_piece_file_insert
CREATE TRIGGER tr_piece_file_insert AFTER INSERT ON mate_workspace_file
        WHEN NEW.deleted = 0 AND length(CAST(NEW.content AS BLOB)) > 0 BEGIN
        INSERT INTO mate_file_piece(file_id, start, length, create_time)
            VALUES (NEW.id, 0, length(CAST(NEW.content AS BLOB)), NEW.update_time);
    END;

-- trigger tr_piece_file_update
CREATE TRIGGER tr_piece_file_update AFTER UPDATE OF content, filename, deleted, agent_id
        ON mate_workspace_file WHEN NOT (NEW.deleted = 0 AND OLD.deleted = 0 AND NEW.agent_id = OLD.agent_id AND NEW.filename = OLD.filename AND length(CAST(NEW.content AS BLOB)) > length(CAST(OLD.content AS BLOB)) AND substr(CAST(NEW.content AS BLOB), 1, length(CAST(OLD.content AS BLOB))) = CAST(OLD.content AS BLOB)) AND (NEW.content IS NOT OLD.content
        OR NEW.filename IS NOT OLD.filename OR NEW.deleted IS NOT OLD.deleted OR NEW.agent_id IS NOT OLD.agent_id)
        BEGIN
        DELETE FROM mate_file_piece WHERE file_id = OLD.id;
        INSERT INTO mate_file_piece(file_id, start, length, create_time) SELECT NEW.id, 0, length(CAST(NEW.content AS BLOB)),
            NEW.update_time WHERE NEW.deleted = 0 AND length(CAST(NEW.content AS BLOB)) > 0;
    END;

-- trigger tr_piece_index_delete
CREATE TRIGGER tr_piece_index_delete AFTER DELETE ON mate_file_piece BEGIN
        DELETE FROM mate_search_text WHERE rowid = OLD.id * 2 + 1;
        DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2 + 1;
        DELETE FROM mate_search_scope WHERE key = OLD.id * 2 + 1;
        DELETE FROM mate_embedding WHERE key = OLD.id * 2 + 1;
    END;

-- trigger tr_piece_index_insert
CREATE TRIGGER tr_piece_index_insert AFTER INSERT ON mate_file_piece BEGIN
        INSERT INTO mate_search_text(rowid, body, scope, prev, date) SELECT NEW.id * 2 + 1,
            mate_search_spaced(CAST(substr(CAST(f.content AS BLOB), NEW.start + 1, NEW.length) AS TEXT)), 'agent' || f.agent_id || ' notes', '',
            (ltrim(strftime('%d', NEW.create_time), '0') || ' ' || (CASE strftime('%m', NEW.create_time) WHEN '01' THEN 'January' WHEN '02' THEN 'February' WHEN '03' THEN 'March' WHEN '04' THEN 'April' WHEN '05' THEN 'May' WHEN '06' THEN 'June' WHEN '07' THEN 'July' WHEN '08' THEN 'August' WHEN '09' THEN 'September' WHEN '10' THEN 'October' WHEN '11' THEN 'November' WHEN '12' THEN 'December' ELSE '' END) || ' ' || strftime('%Y', NEW.create_time) || ' ' || (CASE strftime('%w', NEW.create_time) WHEN '0' THEN 'Sunday' WHEN '1' THEN 'Monday' WHEN '2' THEN 'Tuesday' WHEN '3' THEN 'Wednesday' WHEN '4' THEN 'Thursday' WHEN '5' THEN 'Friday' WHEN '6' THEN 'Saturday' ELSE '' END)) FROM mate_workspace_file f WHERE f.id = NEW.file_id;
        INSERT INTO mate_search_trigram(rowid, body, scope, source, agent_id, conversation_id, ref_id, filename,
            time) SELECT NEW.id * 2 + 1, CAST(substr(CAST(f.content AS BLOB), NEW.start + 1, NEW.length) AS TEXT), '=' || f.agent_id || '=n', 'notes', f.agent_id, NULL, f.id,
            f.filename, NEW.create_time FROM mate_workspace_file f WHERE f.id = NEW.file_id;
        INSERT OR REPLACE INTO mate_search_scope(key, agent_id) SELECT NEW.id * 2 + 1, f.agent_id
            FROM mate_workspace_file f WHERE f.id = NEW.file_id;
    END;

-- trigger tr_search_fact_delete
CREATE TRIGGER tr_search_fact_delete AFTER DELETE ON mate_message_fact BEGIN
            DELETE FROM mate_search_text WHERE rowid = OLD.message_id * 2;
            INSERT INTO mate_search_text(rowid, body, scope, prev, date, facts) SELECT x.id * 2, mate_search_spaced(x.content), 'agent' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = x.conversation_id) || ' conversations', CASE WHEN x.role = 'user' THEN mate_search_spaced((CASE WHEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), 1, 1) = '[' AND instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') BETWEEN 2 AND 130 THEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') + 2) ELSE (SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1) END)) END, (ltrim(strftime('%d', x.create_time), '0') || ' ' || (CASE strftime('%m', x.create_time) WHEN '01' THEN 'January' WHEN '02' THEN 'February' WHEN '03' THEN 'March' WHEN '04' THEN 'April' WHEN '05' THEN 'May' WHEN '06' THEN 'June' WHEN '07' THEN 'July' WHEN '08' THEN 'August' WHEN '09' THEN 'September' WHEN '10' THEN 'October' WHEN '11' THEN 'November' WHEN '12' THEN 'December' ELSE '' END) || ' ' || strftime('%Y', x.create_time) || ' ' || (CASE strftime('%w', x.create_time) WHEN '0' THEN 'Sunday' WHEN '1' THEN 'Monday' WHEN '2' THEN 'Tuesday' WHEN '3' THEN 'Wednesday' WHEN '4' THEN 'Thursday' WHEN '5' THEN 'Friday' WHEN '6' THEN 'Saturday' ELSE '' END)), mate_search_spaced((SELECT group_concat(f.fact, ' ') FROM mate_message_fact f WHERE f.message_id = x.id)) FROM mate_message x WHERE x.id = OLD.message_id
                AND x.role IN ('user', 'assistant') AND x.content_format = 'text' AND NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = x.conversation_id AND x.id > i.after_message_id);
        END;

-- trigger tr_search_fact_insert
CREATE TRIGGER tr_search_fact_insert AFTER INSERT ON mate_message_fact BEGIN
            DELETE FROM mate_search_text WHERE rowid = NEW.message_id * 2;
            INSERT INTO mate_search_text(rowid, body, scope, prev, date, facts) SELECT x.id * 2, mate_search_spaced(x.content), 'agent' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = x.conversation_id) || ' conversations', CASE WHEN x.role = 'user' THEN mate_search_spaced((CASE WHEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), 1, 1) = '[' AND instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') BETWEEN 2 AND 130 THEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') + 2) ELSE (SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1) END)) END, (ltrim(strftime('%d', x.create_time), '0') || ' ' || (CASE strftime('%m', x.create_time) WHEN '01' THEN 'January' WHEN '02' THEN 'February' WHEN '03' THEN 'March' WHEN '04' THEN 'April' WHEN '05' THEN 'May' WHEN '06' THEN 'June' WHEN '07' THEN 'July' WHEN '08' THEN 'August' WHEN '09' THEN 'September' WHEN '10' THEN 'October' WHEN '11' THEN 'November' WHEN '12' THEN 'December' ELSE '' END) || ' ' || strftime('%Y', x.create_time) || ' ' || (CASE strftime('%w', x.create_time) WHEN '0' THEN 'Sunday' WHEN '1' THEN 'Monday' WHEN '2' THEN 'Tuesday' WHEN '3' THEN 'Wednesday' WHEN '4' THEN 'Thursday' WHEN '5' THEN 'Friday' WHEN '6' THEN 'Saturday' ELSE '' END)), mate_search_spaced((SELECT group_concat(f.fact, ' ') FROM mate_message_fact f WHERE f.message_id = x.id)) FROM mate_message x WHERE x.id = NEW.message_id
                AND x.role IN ('user', 'assistant') AND x.content_format = 'text' AND NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = x.conversation_id AND x.id > i.after_message_id);
        END;

-- trigger tr_search_message_delete
CREATE TRIGGER tr_search_message_delete AFTER DELETE ON mate_message BEGIN
            DELETE FROM mate_search_text WHERE rowid = OLD.id * 2;
            DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2;
            DELETE FROM mate_search_text WHERE rowid = (SELECT n.id FROM mate_message n WHERE n.conversation_id = OLD.conversation_id AND n.id > OLD.id AND n.role IN ('user', 'assistant') AND n.content_format = 'text' AND NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = n.conversation_id AND n.id > i.after_message_id) ORDER BY n.id LIMIT 1) * 2; INSERT INTO mate_search_text(rowid, body, scope, prev, date, facts) SELECT x.id * 2, mate_search_spaced(x.content), 'agent' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = x.conversation_id) || ' conversations', CASE WHEN x.role = 'user' THEN mate_search_spaced((CASE WHEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), 1, 1) = '[' AND instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') BETWEEN 2 AND 130 THEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') + 2) ELSE (SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1) END)) END, (ltrim(strftime('%d', x.create_time), '0') || ' ' || (CASE strftime('%m', x.create_time) WHEN '01' THEN 'January' WHEN '02' THEN 'February' WHEN '03' THEN 'March' WHEN '04' THEN 'April' WHEN '05' THEN 'May' WHEN '06' THEN 'June' WHEN '07' THEN 'July' WHEN '08' THEN 'August' WHEN '09' THEN 'September' WHEN '10' THEN 'October' WHEN '11' THEN 'November' WHEN '12' THEN 'December' ELSE '' END) || ' ' || strftime('%Y', x.create_time) || ' ' || (CASE strftime('%w', x.create_time) WHEN '0' THEN 'Sunday' WHEN '1' THEN 'Monday' WHEN '2' THEN 'Tuesday' WHEN '3' THEN 'Wednesday' WHEN '4' THEN 'Thursday' WHEN '5' THEN 'Friday' WHEN '6' THEN 'Saturday' ELSE '' END)), mate_search_spaced((SELECT group_concat(f.fact, ' ') FROM mate_message_fact f WHERE f.message_id = x.id)) FROM mate_message x WHERE x.id = (SELECT n.id FROM mate_message n WHERE n.conversation_id = OLD.conversation_id AND n.id > OLD.id AND n.role IN ('user', 'assistant') AND n.content_format = 'text' AND NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = n.conversation_id AND n.id > i.after_message_id) ORDER BY n.id LIMIT 1);
        END;

-- trigger tr_search_message_insert
CREATE TRIGGER tr_search_message_insert AFTER INSERT ON mate_message
            WHEN NEW.role IN ('user', 'assistant') AND NEW.content_format = 'text' AND NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = NEW.conversation_id AND NEW.id > i.after_message_id) BEGIN
            INSERT INTO mate_search_text(rowid, body, scope, prev, date, facts) SELECT NEW.id * 2, mate_search_spaced(NEW.content), 'agent' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = NEW.conversation_id) || ' conversations', CASE WHEN NEW.role = 'user' THEN mate_search_spaced((CASE WHEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = NEW.conversation_id AND p.id < NEW.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), 1, 1) = '[' AND instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = NEW.conversation_id AND p.id < NEW.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') BETWEEN 2 AND 130 THEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = NEW.conversation_id AND p.id < NEW.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = NEW.conversation_id AND p.id < NEW.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') + 2) ELSE (SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = NEW.conversation_id AND p.id < NEW.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1) END)) END, (ltrim(strftime('%d', NEW.create_time), '0') || ' ' || (CASE strftime('%m', NEW.create_time) WHEN '01' THEN 'January' WHEN '02' THEN 'February' WHEN '03' THEN 'March' WHEN '04' THEN 'April' WHEN '05' THEN 'May' WHEN '06' THEN 'June' WHEN '07' THEN 'July' WHEN '08' THEN 'August' WHEN '09' THEN 'September' WHEN '10' THEN 'October' WHEN '11' THEN 'November' WHEN '12' THEN 'December' ELSE '' END) || ' ' || strftime('%Y', NEW.create_time) || ' ' || (CASE strftime('%w', NEW.create_time) WHEN '0' THEN 'Sunday' WHEN '1' THEN 'Monday' WHEN '2' THEN 'Tuesday' WHEN '3' THEN 'Wednesday' WHEN '4' THEN 'Thursday' WHEN '5' THEN 'Friday' WHEN '6' THEN 'Saturday' ELSE '' END)), mate_search_spaced((SELECT group_concat(f.fact, ' ') FROM mate_message_fact f WHERE f.message_id = NEW.id));
            INSERT INTO mate_search_trigram(rowid, body, scope, source, agent_id, conversation_id, ref_id, filename, time) SELECT NEW.id * 2, NEW.content, '=' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = NEW.conversation_id) || '=c', 'conversations', (SELECT c.agent_id FROM mate_conversation c WHERE c.id = NEW.conversation_id), NEW.conversation_id, NEW.id, NULL, NEW.create_time;
        END;

-- trigger tr_search_message_update
CREATE TRIGGER tr_search_message_update AFTER UPDATE OF content, role, content_format
            ON mate_message BEGIN
            DELETE FROM mate_search_text WHERE rowid = OLD.id * 2;
            DELETE FROM mate_search_trigram WHERE rowid = OLD.id * 2;
            INSERT INTO mate_search_text(rowid, body, scope, prev, date, facts) SELECT NEW.id * 2, mate_search_spaced(NEW.content), 'agent' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = NEW.conversation_id) || ' conversations', CASE WHEN NEW.role = 'user' THEN mate_search_spaced((CASE WHEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = NEW.conversation_id AND p.id < NEW.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), 1, 1) = '[' AND instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = NEW.conversation_id AND p.id < NEW.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') BETWEEN 2 AND 130 THEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = NEW.conversation_id AND p.id < NEW.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = NEW.conversation_id AND p.id < NEW.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') + 2) ELSE (SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = NEW.conversation_id AND p.id < NEW.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1) END)) END, (ltrim(strftime('%d', NEW.create_time), '0') || ' ' || (CASE strftime('%m', NEW.create_time) WHEN '01' THEN 'January' WHEN '02' THEN 'February' WHEN '03' THEN 'March' WHEN '04' THEN 'April' WHEN '05' THEN 'May' WHEN '06' THEN 'June' WHEN '07' THEN 'July' WHEN '08' THEN 'August' WHEN '09' THEN 'September' WHEN '10' THEN 'October' WHEN '11' THEN 'November' WHEN '12' THEN 'December' ELSE '' END) || ' ' || strftime('%Y', NEW.create_time) || ' ' || (CASE strftime('%w', NEW.create_time) WHEN '0' THEN 'Sunday' WHEN '1' THEN 'Monday' WHEN '2' THEN 'Tuesday' WHEN '3' THEN 'Wednesday' WHEN '4' THEN 'Thursday' WHEN '5' THEN 'Friday' WHEN '6' THEN 'Saturday' ELSE '' END)), mate_search_spaced((SELECT group_concat(f.fact, ' ') FROM mate_message_fact f WHERE f.message_id = NEW.id)) WHERE NEW.role IN ('user', 'assistant') AND NEW.content_format = 'text' AND NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = NEW.conversation_id AND NEW.id > i.after_message_id);
            INSERT INTO mate_search_trigram(rowid, body, scope, source, agent_id, conversation_id, ref_id, filename, time) SELECT NEW.id * 2, NEW.content, '=' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = NEW.conversation_id) || '=c', 'conversations', (SELECT c.agent_id FROM mate_conversation c WHERE c.id = NEW.conversation_id), NEW.conversation_id, NEW.id, NULL, NEW.create_time WHERE NEW.role IN ('user', 'assistant') AND NEW.content_format = 'text' AND NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = NEW.conversation_id AND NEW.id > i.after_message_id);
            DELETE FROM mate_search_text WHERE rowid = (SELECT n.id FROM mate_message n WHERE n.conversation_id = OLD.conversation_id AND n.id > OLD.id AND n.role IN ('user', 'assistant') AND n.content_format = 'text' AND NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = n.conversation_id AND n.id > i.after_message_id) ORDER BY n.id LIMIT 1) * 2; INSERT INTO mate_search_text(rowid, body, scope, prev, date, facts) SELECT x.id * 2, mate_search_spaced(x.content), 'agent' || (SELECT c.agent_id FROM mate_conversation c WHERE c.id = x.conversation_id) || ' conversations', CASE WHEN x.role = 'user' THEN mate_search_spaced((CASE WHEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), 1, 1) = '[' AND instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') BETWEEN 2 AND 130 THEN substr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), instr((SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1), '] ') + 2) ELSE (SELECT CASE WHEN p.role = 'user' THEN p.content END FROM mate_message p WHERE p.conversation_id = x.conversation_id AND p.id < x.id AND p.role IN ('user', 'assistant') AND p.content_format = 'text' ORDER BY p.id DESC LIMIT 1) END)) END, (ltrim(strftime('%d', x.create_time), '0') || ' ' || (CASE strftime('%m', x.create_time) WHEN '01' THEN 'January' WHEN '02' THEN 'February' WHEN '03' THEN 'March' WHEN '04' THEN 'April' WHEN '05' THEN 'May' WHEN '06' THEN 'June' WHEN '07' THEN 'July' WHEN '08' THEN 'August' WHEN '09' THEN 'September' WHEN '10' THEN 'October' WHEN '11' THEN 'November' WHEN '12' THEN 'December' ELSE '' END) || ' ' || strftime('%Y', x.create_time) || ' ' || (CASE strftime('%w', x.create_time) WHEN '0' THEN 'Sunday' WHEN '1' THEN 'Monday' WHEN '2' THEN 'Tuesday' WHEN '3' THEN 'Wednesday' WHEN '4' THEN 'Thursday' WHEN '5' THEN 'Friday' WHEN '6' THEN 'Saturday' ELSE '' END)), mate_search_spaced((SELECT group_concat(f.fact, ' ') FROM mate_message_fact f WHERE f.message_id = x.id)) FROM mate_message x WHERE x.id = (SELECT n.id FROM mate_message n WHERE n.conversation_id = OLD.conversation_id AND n.id > OLD.id AND n.role IN ('user', 'assistant') AND n.content_format = 'text' AND NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = n.conversation_id AND n.id > i.after_message_id) ORDER BY n.id LIMIT 1);
        END;

-- trigger tr_search_scope_message_delete
CREATE TRIGGER tr_search_scope_message_delete AFTER DELETE ON mate_message BEGIN
        DELETE FROM mate_search_scope WHERE key = OLD.id * 2; END;

-- trigger tr_search_scope_message_insert
CREATE TRIGGER tr_search_scope_message_insert AFTER INSERT ON mate_message
        WHEN NEW.role IN ('user', 'assistant') AND NEW.content_format = 'text' AND NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = NEW.conversation_id AND NEW.id > i.after_message_id) BEGIN INSERT OR REPLACE INTO mate_search_scope(key, agent_id) SELECT NEW.id * 2, c.agent_id FROM mate_conversation c WHERE c.id = NEW.conversation_id; END;

-- trigger tr_search_scope_message_update
CREATE TRIGGER tr_search_scope_message_update AFTER UPDATE OF content, role, content_format
        ON mate_message WHEN NEW.role IN ('user', 'assistant') AND NEW.content_format = 'text' AND NOT EXISTS (SELECT 1 FROM mate_incognito i WHERE i.conversation_id = NEW.conversation_id AND NEW.id > i.after_message_id) BEGIN INSERT OR REPLACE INTO mate_search_scope(key, agent_id) SELECT NEW.id * 2, c.agent_id FROM mate_conversation c WHERE c.id = NEW.conversation_id; END;

